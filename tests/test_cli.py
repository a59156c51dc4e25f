"""The command line end to end on tiny models: outputs, verdicts, and clear errors for bad input."""

import json
import subprocess
import sys

import pytest

from mkc.cli import main


def test_compile_writes_every_stage(tmp_path, capsys):
    out = tmp_path / "build"
    rc = main(["compile", "tiny-llama", "--batch", "1,3", "--max-seq-len", "64", "--out", str(out), "-q"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and "kernel" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["batches"] == [1, 3] and manifest["target"] == "h200"
    for b in (1, 3):
        bdir = out / f"b{b}"
        for name in ("graph.json", "tasks.json", "schedule.json", "verify.json", "kernel.cu", "report.json"):
            assert (bdir / name).is_file(), name
        rep = json.loads((bdir / "report.json").read_text())
        assert rep["batch"] == b and rep["verify"]["ok"] is True
        assert rep["graph"]["param_bytes"] > 0 and rep["tasks"]
        assert rep["schedule"]["makespan_us"] >= rep["schedule"]["lower_bound_us"] > 0
        # what the kernel does: batch 1 FMAs, batch 3 tensor cores, both fed by the weight pipeline on the H200
        plan = rep["kernel"]["plan"]
        assert plan["gemv"] == ("fp32 FMA" if b == 1 else "tensor cores (mma.sync bf16)")
        # the producer: a warpgroup whose registers the consumers take (CodegenOptions.consumer_regs)
        assert plan["weights"].startswith("a weight pipeline") and plan["threads"] == plan["consumer_threads"] + 128
        assert plan["consumer_regs"] == 200 and "producer warpgroup" in plan["weights"]
    # the saved schedules verify again from disk, and can be drawn
    assert main(["verify", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    assert (out / "b1" / "schedule.png").stat().st_size > 0
    json.loads((out / "b1" / "schedule.trace.json").read_text())


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["compile", "no-such-model"], "llama-3.2-1b"),  # lists the known names
        (["compile", "tiny-llama", "--target", "tpu"], "h200"),  # lists the known targets
        (["compile", "tiny-llama", "--batch", "0"], "1 to 64"),
        (["compile", "tiny-llama", "--batch", "65"], "1 to 64"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "never"
    rc = main(argv + ["--out", str(out), "-q"])
    assert rc == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()
    assert not any(p.name.startswith(".never") for p in tmp_path.iterdir())


def test_default_out_parent_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "tiny-mistral", "--max-seq-len", "16", "--stop-after", "lower", "-q"]) == 0
    assert (tmp_path / "build" / "tiny-mistral-h200" / "b1" / "tasks.json").is_file()


def test_failed_build_leaves_no_parent_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "no-such-model", "-q"]) == 2
    assert not (tmp_path / "build").exists()


def test_unsupported_architecture_exits_2(tmp_path, capsys):
    cfg = tmp_path / "gpt2"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
        "vocab_size": 128, "n_positions": 64}))
    out = tmp_path / "out"
    rc = main(["compile", str(cfg), "--out", str(out), "-q"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "GPT2" in err and "Llama" in err
    assert not out.exists()


def test_verify_rejects_a_tampered_schedule(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["compile", "tiny-qwen3", "--max-seq-len", "32", "--out", str(out), "-q", "--stop-after", "verify"]) == 0
    sched_path = out / "b1" / "schedule.json"
    sched = json.loads(sched_path.read_text())
    sched["thresholds"][0] += 1  # an unreachable wait: the kernel would hang
    sched_path.write_text(json.dumps(sched))
    assert main(["verify", str(out)]) == 1
    assert "UNSAFE" in capsys.readouterr().out


def test_python_dash_m_and_help():
    r = subprocess.run([sys.executable, "-m", "mkc", "compile", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for opt in ("--target", "--batch", "--max-seq-len", "--sync", "--out", "--time-limit"):
        assert opt in r.stdout


def test_rerun_from_saved_intermediates(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["compile", "tiny-llama", "--max-seq-len", "32", "--out", str(out), "-q"]) == 0
    bdir = out / "b1"
    tasks_before = (bdir / "tasks.json").read_text()
    # a different scheduler from the saved tasks.json: the task graph is kept, the schedule changes
    assert main(["rerun", str(bdir), "--from", "schedule", "--method", "round_robin", "-q"]) == 0
    assert (bdir / "tasks.json").read_text() == tasks_before
    assert json.loads((bdir / "schedule.json").read_text())["method"] == "round_robin"
    assert json.loads((bdir / "report.json").read_text())["verify"]["ok"] is True
    # NaN-sentinel code from the saved graph.json
    assert main(["rerun", str(bdir), "--from", "lower", "--sync", "nan", "-q"]) == 0
    assert json.loads((bdir / "schedule.json").read_text())["sync"] == "nan"
    assert (bdir / "kernel.cu").is_file()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    # a directory without the needed intermediate is a clear error
    assert main(["rerun", str(out), "--from", "schedule"]) == 2
    assert "not a batch directory" in capsys.readouterr().err
