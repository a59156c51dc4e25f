"""A new user's path through the command line (issue #15): real checkpoints, self-describing builds,
device memory, one-line errors, builds that are never destroyed, and the CLI basics.

Each case runs ``python -m mkc`` in a subprocess, as a user would, and checks the exit code, the
message, and that nothing was written or destroyed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = json.loads((ROOT / "models" / "tiny-llama" / "config.json").read_text())


def mkc(*args, cwd=None, timeout=300, python=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", python, *args] if python else [sys.executable, "-m", "mkc", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def tree(path: Path) -> dict:
    """Every file under ``path`` with its content hash: equal trees mean nothing changed."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def save_model(folder: Path, dtype: str = "bf16", config: dict | None = None) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config or TINY)
    model_type = cfg.pop("model_type")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg))
    model.to({"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype])
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("models") / "llama")


@pytest.fixture(scope="module")
def folder_build(weights_dir, tmp_path_factory):
    """A build of a folder with weights, compiled from a working directory of its own."""
    work = tmp_path_factory.mktemp("work")
    r = mkc("compile", os.path.relpath(weights_dir, work), "--max-seq-len", "32", "--stop-after", "verify",
            "--out", "out", "-q", cwd=work)
    assert r.returncode == 0, r.stderr
    return work / "out"


# ---- 1. weights ------------------------------------------------------------------------------


def test_folder_without_weights_compiles_but_run_needs_random_weights(tmp_path):
    model = tmp_path / "noweights"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    (model / "pytorch_model.bin.bak").write_text("not a checkpoint")
    r = mkc("compile", str(model), "--max-seq-len", "16", "--stop-after", "lower", "--out", str(tmp_path / "b"), "-q")
    assert r.returncode == 0, r.stderr
    assert "has no weights" in r.stderr and "--random-weights" in r.stderr
    r = mkc("run", str(tmp_path / "b"))
    assert r.returncode == 2
    assert "has no weights" in r.stderr and "--random-weights" in r.stderr and "Traceback" not in r.stderr
    # with the opt-in the weights pass, and the next thing asked for is a GPU
    r = mkc("run", str(tmp_path / "b"), "--random-weights")
    assert r.returncode == 2 and "seeded random weights" in r.stderr and "GPU" in r.stderr


def test_run_help_does_not_promise_random_weights():
    r = mkc("run", "--help")
    assert r.returncode == 0
    assert "default: seeded random weights" not in r.stdout.replace("\n", " ")
    assert "--random-weights" in r.stdout


def test_an_existing_folder_wins_over_a_registry_name(tmp_path):
    qwen3 = json.loads((ROOT / "models" / "tiny-qwen3" / "config.json").read_text())
    (tmp_path / "tiny-llama").mkdir()
    (tmp_path / "tiny-llama" / "config.json").write_text(json.dumps(qwen3))
    r = mkc("compile", "tiny-llama", "--max-seq-len", "16", "--stop-after", "capture", "--out", "o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"the folder {tmp_path / 'tiny-llama'}" in r.stderr and "not the bundled registry model" in r.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["model_path"] == str(tmp_path / "tiny-llama") and manifest["registry"] is False
    assert json.loads((tmp_path / "o" / "b1" / "graph.json").read_text())["model"]["arch"] == "Qwen3ForCausalLM"


@pytest.mark.parametrize("damage", ["truncate", "shape"])
def test_compile_checks_the_checkpoint_headers(weights_dir, tmp_path, damage):
    model = tmp_path / "m"
    shutil.copytree(weights_dir, model)
    st = model / "model.safetensors"
    if damage == "truncate":
        data = st.read_bytes()
        st.write_bytes(data[: len(data) // 2])
        needle = "truncated"
    else:  # the config of a wider model beside these weights
        cfg = json.loads((model / "config.json").read_text())
        cfg["intermediate_size"] *= 2
        (model / "config.json").write_text(json.dumps(cfg))
        needle = "different models"
    out = tmp_path / "out"
    r = mkc("compile", str(model), "--max-seq-len", "16", "--out", str(out), "-q")
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_fp16_weights_are_converted_with_a_notice(tmp_path):
    model = save_model(tmp_path / "fp16", "fp16")
    r = mkc("compile", str(model), "--max-seq-len", "16", "--stop-after", "capture", "--out", str(tmp_path / "o"), "-q")
    assert r.returncode == 0, r.stderr
    assert "[mkc]" in r.stderr and "fp16 weight(s) converted to bf16" in r.stderr


def test_weight_files_are_the_checkpoint_only(weights_dir, tmp_path):
    from mkc.capture import resolve

    model = tmp_path / "m"
    shutil.copytree(weights_dir, model)
    shutil.copy(model / "model.safetensors", model / "consolidated.safetensors")
    assert [p.name for p in resolve(str(model)).weight_files] == ["model.safetensors"]


# ---- 2. a self-describing build --------------------------------------------------------------


def test_manifest_describes_the_build(folder_build, weights_dir):
    m = json.loads((folder_build / "manifest.json").read_text())
    assert m["model_path"] == str(weights_dir.resolve()) and Path(m["model"]).is_absolute()
    assert len(m["fingerprint"]) == 16 and "model.safetensors" in m["fingerprint_info"]["files"]
    assert m["target"] == "h200" and m["batches"] == [1] and m["max_seq_len"] == 32
    assert m["options"]["method"] == "cpsat" and m["options"]["sync"] == "atomic"
    assert "b1/schedule.json" in m["files"]


def test_run_from_another_directory_checks_the_weights_against_the_manifest(folder_build, weights_dir, tmp_path):
    # from elsewhere: the absolute path finds the weights; the next thing asked for is a GPU
    r = mkc("run", str(folder_build), cwd=tmp_path)
    assert r.returncode == 2 and "unknown model" not in r.stderr and "GPU" in r.stderr, r.stderr
    assert "differ" not in r.stderr
    # other weights of the same shapes (fp32 now): a warning per difference, then on
    other = save_model(tmp_path / "fp32", "fp32")
    r = mkc("run", str(folder_build), "--weights", str(other), cwd=tmp_path)
    assert r.returncode == 2 and "GPU" in r.stderr, r.stderr
    assert "warning: the model differs" in r.stderr and "model.safetensors differs" in r.stderr
    # other shapes: refused before any GPU work
    wide = dict(TINY, intermediate_size=2 * TINY["intermediate_size"])
    r = mkc("run", str(folder_build), "--weights", str(save_model(tmp_path / "wide", config=wide)), cwd=tmp_path)
    assert r.returncode == 2 and "not those the build was compiled from" in r.stderr, r.stderr


def test_corrupt_safetensors_at_run_time_is_one_message(folder_build, weights_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(weights_dir, bad)
    (bad / "model.safetensors").write_bytes(b"\xff" * 64)
    r = mkc("run", str(folder_build), "--weights", str(bad))
    assert r.returncode == 2 and "not a usable safetensors file" in r.stderr and "Traceback" not in r.stderr


# ---- 3. device memory ------------------------------------------------------------------------


def least_memory(need: int) -> int:
    """The smallest device memory whose usable part (less 5 % and 1 GiB) holds ``need`` bytes."""
    import dataclasses

    from mkc.target import get_target
    from mkc.verify import memory

    lo, hi = need, 2 * need + 2**31
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if memory.usable(dataclasses.replace(get_target("h200"), memory_bytes=mid)) < need \
            else (lo, mid)
    return lo


def test_llama_70b_on_one_h200_is_refused_before_capture(tmp_path):
    t0 = time.perf_counter()
    r = mkc("compile", "llama-3.1-70b", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert time.perf_counter() - t0 < 60 and "capture" not in r.stderr  # refused from the config
    for needle in ("141.1 GB", "132.9 GB are usable", "h200", "--target b200", "tensor parallel"):
        assert needle in r.stderr, r.stderr
    assert not (tmp_path / "o").exists() and "Traceback" not in r.stderr


def test_a_long_cache_at_batch_64_is_refused_with_the_ways_out(tmp_path):
    r = mkc("compile", "llama-3.1-8b", "--batch", "64", "--max-seq-len", "131072", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    for needle in ("KV cache 1099.5 GB", "--max-seq-len", "--batch", "tensor parallel"):
        assert needle in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_verifier_proves_the_memory_budget_and_the_oracle_agrees(folder_build):
    import dataclasses

    from mkc.schedule.ir import Schedule
    from mkc.target import get_target
    from mkc.taskgraph.ir import TaskGraph
    from mkc.verify import memory, verify
    from mkc.verify.oracle import judge

    rep = json.loads((folder_build / "b1" / "report.json").read_text())
    assert rep["memory"]["fits"] and rep["memory"]["total"] == sum(
        rep["memory"][k] for k in ("weights", "kv_cache", "activations", "tables"))
    vj = json.loads((folder_build / "b1" / "verify.json").read_text())
    assert next(c for c in vj["checks"] if c["name"] == "memory")["figures"]["usable"] == rep["memory"]["usable"]
    tg = TaskGraph.load(folder_build / "b1" / "tasks.json")
    sched = Schedule.load(folder_build / "b1" / "schedule.json")
    mem = least_memory(memory.need(tg, sched)["total"])
    for extra, fits in ((0, True), (-1, False)):  # the smallest device that holds it, and one byte less
        target = dataclasses.replace(get_target("h200"), memory_bytes=mem + extra)
        vr = verify(tg, sched, target)
        assert vr.check("memory").ok is fits and vr.ok is fits
        assert judge(tg, sched, target, seeds=1).safe is fits


def test_a_build_the_verifier_finds_too_big_fails_with_exit_2(folder_build, tmp_path, monkeypatch, capsys):
    """Past the config's lower bound (weights + KV cache), the verifier's check is the proof: a rerun of
    verify on a device just too small fails with the figures, exit 2, and keeps the build."""
    import dataclasses

    import mkc.target as T
    from mkc.cli import main

    build = tmp_path / "b"
    shutil.copytree(folder_build, build)
    need = json.loads((build / "b1" / "report.json").read_text())["memory"]["total"]
    mem = least_memory(need) - 1
    monkeypatch.setitem(T.TARGETS, "h200", dataclasses.replace(T.TARGETS["h200"], memory_bytes=mem))
    before = tree(build)
    assert main(["rerun", str(build / "b1"), "--from", "verify", "-q"]) == 2
    err = capsys.readouterr().err
    assert "does not fit h200" in err and "usable" in err and "Options:" in err
    assert tree(build) == before


def test_run_checks_the_free_device_memory(folder_build):
    from mkc.errors import MkcError
    from mkc.run import check_free_memory

    class Driver:
        def __init__(self, free):
            self.free = free

        def memory(self):
            return self.free, 141 * 10**9

    need = json.loads((folder_build / "b1" / "report.json").read_text())["memory"]["total"]
    said = []
    check_free_memory(Driver(need), [folder_build / "b1"], said.append)
    assert said and "needed" in said[0]
    with pytest.raises(MkcError, match="free of 141.0 GB, but the build needs"):
        check_free_memory(Driver(need - 1), [folder_build / "b1"], said.append)


# ---- 4. one message, no traceback ------------------------------------------------------------


def test_inspect_without_matplotlib_says_how_to_get_it(folder_build):
    block = ("import sys; sys.modules['matplotlib'] = None; from mkc.cli import main; "
             "sys.exit(main(sys.argv[1:]))")
    r = mkc("inspect", str(folder_build), python=block)
    assert r.returncode == 2 and "matplotlib" in r.stderr and "mkc[plot]" in r.stderr
    assert "Traceback" not in r.stderr and not (folder_build / "b1" / "schedule.png").exists()


def test_duplicate_batch_sizes_are_refused_early(tmp_path):
    t0 = time.perf_counter()
    r = mkc("compile", "tiny-llama", "--batch", "2,2", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "more than once" in r.stderr and "Traceback" not in r.stderr
    assert time.perf_counter() - t0 < 30 and not any(tmp_path.iterdir())


@pytest.mark.parametrize("where", ["file", "unwritable"])
def test_out_naming_a_file_or_an_unwritable_path(tmp_path, where):
    if where == "file":
        out = tmp_path / "afile"
        out.write_text("mine")
        needle = "is a file"
    else:
        out = Path("/proc/mkc-nope/out")
        needle = "cannot create the build directory"
    r = mkc("compile", "tiny-llama", "--max-seq-len", "16", "--out", str(out), "-q")
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    if where == "file":
        assert out.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_corrupt_schedule_is_one_message(folder_build, tmp_path, command):
    build = tmp_path / "b"
    shutil.copytree(folder_build, build)
    path = build / "b1" / "schedule.json"
    path.write_text(path.read_text()[:100])
    r = mkc(command, str(build))
    assert r.returncode == 2 and f"cannot read {path}" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_internal_error_is_one_line_and_debug_shows_the_traceback():
    crash = ("import sys, mkc.cli as c; c.COMMANDS['models'] = lambda a: {}['boom']; "
             "sys.exit(c.main(sys.argv[1:]))")
    r = mkc("models", python=crash)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "mkc: internal error: KeyError" in r.stderr and "run with --debug for the traceback" in r.stderr
    r = mkc("models", "--debug", python=crash)
    assert r.returncode == 1 and "Traceback" in r.stderr


# ---- 5. builds are not destroyed --------------------------------------------------------------


def test_an_existing_build_is_replaced_only_with_force_and_never_with_foreign_files(tmp_path):
    out = tmp_path / "o"
    args = ("compile", "tiny-llama", "--max-seq-len", "16", "--stop-after", "lower", "--out", str(out), "-q")
    assert mkc(*args).returncode == 0
    before = tree(out)
    r = mkc(*args)
    assert r.returncode == 2 and "--force" in r.stderr and tree(out) == before
    (out / "NOTES.md").write_text("mine")
    (out / "b1" / "mystuff").mkdir()
    (out / "b1" / "mystuff" / "x.txt").write_text("mine too")
    before = tree(out)
    r = mkc(*args, "--force")
    assert r.returncode == 2 and "NOTES.md" in r.stderr and "did not write" in r.stderr and tree(out) == before
    (out / "NOTES.md").unlink()
    shutil.rmtree(out / "b1" / "mystuff")
    assert mkc(*args, "--force").returncode == 0


def test_rerun_keeps_the_target_and_refreshes_what_it_invalidates(tmp_path):
    out = tmp_path / "o"
    r = mkc("compile", "tiny-llama", "--target", "a100", "--max-seq-len", "16", "--stop-after", "schedule",
            "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert mkc("inspect", str(out)).returncode == 0
    png = (out / "b1" / "schedule.png").read_bytes()
    assert mkc("rerun", str(out / "b1"), "--from", "lower", "--method", "list", "-q").returncode == 0
    rep = json.loads((out / "b1" / "report.json").read_text())
    assert rep["target"] == "a100" and json.loads((out / "b1" / "kernel.json").read_text())["target"] == "a100"
    assert rep["schedule"]["method"] == "list"
    assert (out / "b1" / "schedule.png").read_bytes() != png  # redrawn from the new schedule
    assert json.loads((out / "b1" / "schedule.trace.json").read_text())
    top = json.loads((out / "report.json").read_text())["1"]
    assert top["schedule"]["method"] == "list" and top["verify"]["ok"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"] == ["capture", "lower", "schedule", "verify", "codegen"]
    assert manifest["options"]["method"] == "list" and "b1/kernel.cu" in manifest["files"]
    # an explicit other target is refused, not silently applied
    before = tree(out)
    r = mkc("rerun", str(out / "b1"), "--from", "lower", "--target", "h200", "-q")
    assert r.returncode == 2 and "compiled for a100" in r.stderr and tree(out) == before
    mode = stat.S_IMODE((out / "b1").stat().st_mode)
    assert mode & 0o755 == 0o755 - (0o755 & _umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_build_folders_get_normal_permissions_and_dot_gets_the_folder_name(tmp_path):
    model = tmp_path / "mymodel"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    r = mkc("compile", ".", "--max-seq-len", "16", "--stop-after", "capture", "-q", cwd=model)
    assert r.returncode == 0, r.stderr
    build = model / "build" / "mymodel-h200"
    assert build.is_dir() and not (model / "build" / "-h200").exists()
    for d in (build, build / "b1"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~_umask()


# ---- 6. CLI basics ---------------------------------------------------------------------------


def test_version_and_json_outputs(folder_build, tmp_path):
    import mkc as pkg

    r = mkc("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"mkc {pkg.__version__}"
    models = json.loads(mkc("models", "--json").stdout)
    assert {"name", "architecture", "params", "bf16_bytes"} <= set(models[0])
    r = mkc("verify", str(folder_build), "--json")
    assert r.returncode == 0
    rep = json.loads(r.stdout)
    assert rep[0]["ok"] and [c["name"] for c in rep[0]["checks"]][-1] == "memory"
    r = mkc("compile", "tiny-qwen2", "--max-seq-len", "16", "--stop-after", "lower", "--out", str(tmp_path / "o"),
            "--json", "-q")
    assert r.returncode == 0 and json.loads(r.stdout)["build"] == str(tmp_path / "o")


def test_progress_names_each_stage_with_its_time_and_long_stages_beat(tmp_path, capsys):
    from mkc.pipeline import StageLog, _timed

    r = mkc("compile", "tiny-llama", "--max-seq-len", "16", "--stop-after", "lower", "--out", str(tmp_path / "o"))
    assert r.returncode == 0 and "[mkc] capture " in r.stderr and "[mkc] lower " in r.stderr and " s\n" in r.stderr
    log = StageLog(heartbeat=0.05)
    _timed(log, "capture", time.sleep, 0.3)
    err = capsys.readouterr().err
    assert "[mkc] capture   still running" in err and "[mkc] capture     0.3" in err


@pytest.mark.parametrize("args, needle", [
    (("--time-limit", "0"), "--time-limit must be a positive"),
    (("--time-limit", "-1"), "--time-limit must be a positive"),
    (("--max-seq-len", "0"), "--max-seq-len must be positive"),
])
def test_numeric_options_are_validated(tmp_path, args, needle):
    r = mkc("compile", "tiny-llama", *args, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and needle in r.stderr and not any(tmp_path.iterdir())


def test_max_seq_len_above_the_model_positions_warns(tmp_path):
    r = mkc("compile", "tiny-qwen2", "--max-seq-len", "40000", "--stop-after", "capture", "--out",
            str(tmp_path / "o"), "-q")
    assert r.returncode == 0, r.stderr
    assert "above the model's max_position_embeddings (32768)" in r.stderr
