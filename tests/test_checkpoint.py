"""Checkpoint folders as users have them: which files load, what headers reveal, what is said."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch

from mkc.capture import checkpoint as ck
from mkc.capture.registry import MODELS_DIR
from mkc.capture.weights import load_weights, load_weights_with_notices
from mkc.errors import MkcError

DOWN = "model.layers.1.mlp.down_proj.weight"


def _model(tied: bool = True, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(MODELS_DIR / "tiny-llama"), local_files_only=True)
    cfg.tie_word_embeddings = tied
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """save(name, dtype=bf16, tied=True, **save_pretrained kwargs) -> (folder, model): one save per variant."""
    root = tmp_path_factory.mktemp("ckpt")
    cache = {}

    def save(name, dtype=torch.bfloat16, tied=True, bin=False, **kw):
        if name not in cache:
            m = _model(tied).to(dtype)
            m.save_pretrained(str(root / name), **kw)
            if bin:  # transformers 5 writes safetensors only; older hub repos have this
                (root / name / "model.safetensors").unlink()
                torch.save(m.state_dict(), str(root / name / "pytorch_model.bin"))
            cache[name] = (root / name, m)
        return cache[name]

    return save


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _state(m, dtype=torch.bfloat16):
    return {k: v.detach().to(dtype) for k, v in m.state_dict().items()}


@pytest.fixture
def opened(monkeypatch):
    """The files safetensors opens for reading tensors."""
    import safetensors

    seen = []
    real = safetensors.safe_open

    def spy(path, *a, **kw):
        seen.append(str(path).rsplit("/", 1)[-1])
        return real(path, *a, **kw)

    monkeypatch.setattr(safetensors, "safe_open", spy)
    return seen


def _assert_loaded_exactly(weights, model, dtype=torch.bfloat16):
    want = _state(model, dtype)
    want.pop("lm_head.weight", None) if model.config.tie_word_embeddings else None
    assert set(weights) == set(want)
    for k, v in want.items():
        assert weights[k].dtype == dtype and torch.equal(weights[k], v), k


# ---- which files ------------------------------------------------------------------------------
def test_single_file_loads_and_checks_clean(saved, opened):
    d, m = saved("single")
    c = ck.find_checkpoint(d)
    assert c.format == "safetensors" and [f.name for f in c.files] == ["model.safetensors"] and not c.ignored
    assert c.describe().startswith("model.safetensors, ") and "kB" in c.describe()
    assert ck.check_checkpoint(d) == []
    assert opened == []  # checking reads headers only
    w, notes = load_weights_with_notices(d)
    assert notes == [] and opened == ["model.safetensors"]
    _assert_loaded_exactly(w, m)


def test_sharded_with_index_loads_only_the_indexed_shards(saved, opened, tmp_path):
    d, m = saved("sharded", max_shard_size="100KB")
    index = json.loads((d / ck.ST_INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    d = _copy(d, tmp_path / "sharded")
    # a stray shard-named file from an older download, and Mistral's consolidated copy: neither indexed
    shutil.copy(d / shards[0], d / "model-00001-of-00002.safetensors")
    shutil.copy(d / shards[0], d / "consolidated.safetensors")
    c = ck.find_checkpoint(d)
    assert [f.name for f in c.files] == shards and c.index == d / ck.ST_INDEX
    assert {f.name for f in c.ignored} == {"model-00001-of-00002.safetensors", "consolidated.safetensors"}
    assert f"{len(shards)} safetensors shards ({ck.ST_INDEX})" in c.describe()
    assert "not used: consolidated.safetensors, model-00001-of-00002.safetensors" in c.describe()
    w = load_weights(d)
    assert sorted(set(opened)) == shards
    _assert_loaded_exactly(w, m)


def test_shards_without_index(saved, tmp_path):
    d, m = saved("sharded", max_shard_size="100KB")
    d = _copy(d, tmp_path / "noindex")
    (d / ck.ST_INDEX).unlink()
    assert len(ck.find_checkpoint(d).files) > 2
    _assert_loaded_exactly(load_weights(d), m)
    last = sorted(d.glob("model-*.safetensors"))[1]
    last.unlink()
    with pytest.raises(MkcError) as e:
        ck.find_checkpoint(d)
    assert "shard(s) 2 missing" in str(e.value) and "incomplete download" in str(e.value)


def test_index_naming_a_missing_or_outside_file(saved, tmp_path):
    d, _ = saved("sharded", max_shard_size="100KB")
    d = _copy(d, tmp_path / "badindex")
    shard = sorted(d.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    assert f"names 1 file(s) that {d} lacks: {shard.name}" in str(e.value)
    index = json.loads((d / ck.ST_INDEX).read_text())
    index["weight_map"] = {k: "../../etc/passwd" for k in index["weight_map"]}
    (d / ck.ST_INDEX).write_text(json.dumps(index))
    with pytest.raises(MkcError, match="which is not a file in"):
        ck.find_checkpoint(d)
    (d / ck.ST_INDEX).write_text("{not json")
    with pytest.raises(MkcError, match="cannot read the checkpoint index"):
        ck.find_checkpoint(d)


def test_consolidated_copy_beside_the_single_file_is_never_read(saved, opened, tmp_path):
    d, m = saved("single")
    d = _copy(d, tmp_path / "mistralish")
    shutil.copy(d / "model.safetensors", d / "consolidated.safetensors")
    c = ck.find_checkpoint(d)
    assert [f.name for f in c.files] == ["model.safetensors"]
    assert [f.name for f in c.ignored] == ["consolidated.safetensors"]
    w = load_weights(d)
    assert opened == ["model.safetensors"]
    _assert_loaded_exactly(w, m)


def test_only_loads_what_the_model_needs(saved, tmp_path, opened):
    from safetensors.torch import load_file, save_file

    d, m = saved("single")
    d = _copy(d, tmp_path / "extra")
    sd = load_file(str(d / "model.safetensors"))
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(16)  # old checkpoints carry such buffers
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    w = load_weights(d)
    assert "model.layers.0.self_attn.rotary_emb.inv_freq" not in w
    _assert_loaded_exactly(w, m)


# ---- dtypes -------------------------------------------------------------------------------------
def test_fp16_is_converted_with_one_notice(saved):
    d, m = saved("fp16", dtype=torch.float16)
    notes = ck.check_checkpoint(d)
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"{d}: ") and "fp16 weight(s) converted to bf16" in notes[0]
    assert "rounded" in notes[0]
    w, again = load_weights_with_notices(d)
    assert again == notes
    _assert_loaded_exactly(w, m)  # the fp16 values, rounded to bf16
    told = []
    load_weights(d, notify=told.append)
    assert told == notes
    with pytest.warns(UserWarning, match="fp16 weight"):
        load_weights(d)
    # widening to fp32 is exact: nothing to say
    w32, quiet = load_weights_with_notices(d, torch.float32)
    assert quiet == [] and w32[DOWN].dtype == torch.float32 and torch.equal(w32[DOWN], m.state_dict()[DOWN].float())


def test_fp32_is_converted_with_one_notice(saved):
    d, _ = saved("fp32", dtype=torch.float32)
    notes = ck.check_checkpoint(d)
    assert len(notes) == 1 and "fp32 weight(s) converted to bf16" in notes[0]


def test_integer_weights_are_refused(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    d = _copy(saved("single")[0], tmp_path / "int8")
    sd = load_file(str(d / "model.safetensors"))
    sd[DOWN] = torch.zeros(sd[DOWN].shape, dtype=torch.int8)
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    assert f"weight {DOWN} in {d / 'model.safetensors'} is I8" in str(e.value)
    assert "bf16, fp16 or fp32" in str(e.value) and "quantized" in str(e.value)


# ---- .bin ---------------------------------------------------------------------------------------
def test_bin_checkpoint_loads_with_weights_only(saved, tmp_path):
    d, m = saved("bin", bin=True)
    assert (d / "pytorch_model.bin").is_file() and not list(d.glob("*.safetensors"))
    c = ck.find_checkpoint(d)
    assert c.format == "bin" and "pytorch_model.bin" in c.describe()
    assert ck.check_checkpoint(d) == []
    _assert_loaded_exactly(load_weights(d), m)
    assert ck.fingerprint(d) == ck.fingerprint(_copy(d, tmp_path / "bin2"))


def test_sharded_bin_with_index(saved, tmp_path):
    d = _copy(saved("bin", bin=True)[0], tmp_path / "binshards")
    sd = torch.load(str(d / "pytorch_model.bin"), weights_only=True)
    (d / "pytorch_model.bin").unlink()
    names = sorted(sd)
    halves = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for f, part in halves.items():
        torch.save({k: sd[k] for k in part}, str(d / f))
    (d / ck.BIN_INDEX).write_text(json.dumps({"weight_map": {k: f for f, part in halves.items() for k in part}}))
    c = ck.find_checkpoint(d)
    assert c.format == "bin" and c.index == d / ck.BIN_INDEX and len(c.files) == 2
    _assert_loaded_exactly(load_weights(d), saved("bin", bin=True)[1])


def test_bin_with_pickled_code_is_refused(saved, tmp_path):
    d = _copy(saved("bin", bin=True)[0], tmp_path / "evil")
    torch.save({"model.embed_tokens.weight": torch.zeros(2), "x": _Payload()}, str(d / "pytorch_model.bin"))
    with pytest.raises(MkcError) as e:
        load_weights(d)
    msg = str(e.value)
    assert f"{d / 'pytorch_model.bin'} cannot be loaded safely" in msg and "weights_only=True" in msg
    assert "convert it to safetensors" in msg
    assert not _Payload.ran


class _Payload:
    ran = False

    def __reduce__(self):
        return (_Payload._run, ())

    @staticmethod
    def _run():
        _Payload.ran = True
        return _Payload()


def test_safetensors_preferred_over_bin(saved, tmp_path, opened):
    d = _copy(saved("single")[0], tmp_path / "both")
    shutil.copy(saved("bin", bin=True)[0] / "pytorch_model.bin", d / "pytorch_model.bin")
    c = ck.find_checkpoint(d)
    assert c.format == "safetensors" and [f.name for f in c.ignored] == ["pytorch_model.bin"]
    load_weights(d)
    assert opened == ["model.safetensors"]


# ---- no weights ---------------------------------------------------------------------------------
def test_folder_without_weights(tmp_path):
    d = tmp_path / "bare"
    d.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama" / "config.json", d / "config.json")
    assert ck.describe_weights(d) == "no weights"
    with pytest.raises(MkcError) as e:
        ck.require_weights(d)
    msg = str(e.value)
    assert msg.startswith(f"{d} has no weights: ") and "--random-weights" in msg
    assert "model.safetensors" in msg and "pytorch_model.bin" in msg
    with pytest.raises(MkcError, match="--random-weights"):
        ck.check_checkpoint(d)
    # the library itself still falls back, but says so
    told = []
    w = load_weights(d, notify=told.append)
    assert told == [f"{d} has no weights: using seeded random weights (seed 0)"] and DOWN in w
    # a lone consolidated.safetensors is not a transformers checkpoint: named, not loaded
    shutil.copy(saved_single_file(tmp_path), d / "consolidated.safetensors")
    assert ck.describe_weights(d) == "no weights; not used: consolidated.safetensors"
    with pytest.raises(MkcError, match="it holds consolidated.safetensors, which is not a transformers checkpoint"):
        ck.require_weights(d, option="random_weights=True")


def saved_single_file(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "one.safetensors"
    save_file({"tok_embeddings.weight": torch.zeros(4, 4)}, str(path))
    return path


def test_sources_without_a_folder_need_no_weights():
    assert ck.require_weights("tiny-llama") is None
    assert ck.check_checkpoint("tiny-llama") == []
    assert ck.describe_weights("tiny-llama").startswith("seeded random weights")


# ---- missing / wrong tensors --------------------------------------------------------------------
def _drop(path, name):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(path))
    del sd[name]
    save_file(sd, str(path), metadata={"format": "pt"})


def test_a_missing_tensor_is_named(saved, tmp_path):
    d = _copy(saved("single")[0], tmp_path / "missing")
    _drop(d / "model.safetensors", DOWN)
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    msg = str(e.value)
    assert msg.startswith(f"the checkpoint in {d} lacks 1 of the ")
    assert f"{DOWN} [128, 256] (no file of the checkpoint (model.safetensors) holds it)" in msg


def test_a_missing_tensor_names_the_shard_the_index_gives(saved, tmp_path):
    d = _copy(saved("sharded", max_shard_size="100KB")[0], tmp_path / "missing-shard")
    shard = json.loads((d / ck.ST_INDEX).read_text())["weight_map"][DOWN]
    _drop(d / shard, DOWN)
    with pytest.raises(MkcError) as e:
        load_weights(d)
    assert f"{DOWN} [128, 256] ({ck.ST_INDEX} puts it in {shard}, which does not hold it)" in str(e.value)


def test_tied_head_may_be_absent_untied_may_not(saved, tmp_path):
    d, m = saved("untied", tied=False)
    assert ck.check_checkpoint(d) == [] and "lm_head.weight" in load_weights(d)
    d = _copy(d, tmp_path / "nohead")
    _drop(d / "model.safetensors", "lm_head.weight")
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    assert "lm_head.weight [512, 128]" in str(e.value) and "tie_word_embeddings" in str(e.value)
    # explicit expectations with a head: a tied config excuses it
    tied_dir = saved("single")[0]
    exp = {n: (tuple(t.shape), torch.bfloat16) for n, t in _model(False).state_dict().items()}
    assert ck.check_checkpoint(tied_dir, exp) == []


def test_shape_mismatch_with_config(saved, tmp_path):
    d = _copy(saved("single")[0], tmp_path / "othercfg")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 384
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    msg = str(e.value)
    assert "has shape [256, 128], but the model's config.json needs [384, 128]" in msg
    assert "different models" in msg


# ---- broken files -------------------------------------------------------------------------------
def test_truncated_file(saved, tmp_path, opened):
    d = _copy(saved("single")[0], tmp_path / "trunc")
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    msg = str(e.value)
    assert msg.startswith(f"{f} is not a usable safetensors file: ")
    assert f"describes {len(data)} bytes but the file has {len(data) // 2}: it is truncated" in msg
    with pytest.raises(MkcError, match="truncated"):
        load_weights(d)
    assert opened == []
    (n,) = struct.unpack("<Q", data[:8])
    f.write_bytes(data[: 8 + n // 2])  # cut inside the header
    with pytest.raises(MkcError, match=rf"header of {n} bytes but the file is {8 + n // 2} bytes \(truncated\)"):
        ck.check_checkpoint(d)
    f.write_bytes(data[:3])
    with pytest.raises(MkcError, match="shorter than the 8-byte header length"):
        ck.check_checkpoint(d)


def test_garbage_file(saved, tmp_path):
    d = _copy(saved("single")[0], tmp_path / "garbage")
    f = d / "model.safetensors"
    f.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(MkcError) as e:
        ck.check_checkpoint(d)
    assert str(e.value).startswith(f"{f} is not a usable safetensors file: its first 8 bytes give a header of ")
    assert "(not a safetensors file, or corrupt)" in str(e.value)
    f.write_bytes(struct.pack("<Q", 16) + b"\xff" * 16 + b"\0" * 64)
    with pytest.raises(MkcError, match="its header is not JSON"):
        ck.check_checkpoint(d)
    header = json.dumps({DOWN: {"dtype": "BF16"}}).encode()
    f.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(MkcError, match=f"the header entry of '{DOWN}' is malformed"):
        ck.check_checkpoint(d)


# ---- fingerprint --------------------------------------------------------------------------------
def test_fingerprint_follows_content_not_path(saved, tmp_path, monkeypatch):
    import safetensors

    d, _ = saved("sharded", max_shard_size="100KB")
    monkeypatch.setattr(safetensors, "safe_open", None)  # no tensor data may be read
    fp = ck.fingerprint(d)
    assert len(fp) == 16 and fp == ck.fingerprint(_copy(d, tmp_path / "moved"))
    info = ck.fingerprint_info(d)
    assert info["weights"] == "safetensors" and info["tensors"][DOWN][:2] == ["BF16", [128, 256]]
    assert ck.diff_fingerprint_info(info, ck.fingerprint_info(tmp_path / "moved")) == []

    other = _copy(d, tmp_path / "edited")
    cfg = json.loads((other / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-6
    (other / "config.json").write_text(json.dumps(cfg))
    shard = json.loads((other / ck.ST_INDEX).read_text())["weight_map"][DOWN]
    monkeypatch.undo()
    _drop(other / shard, DOWN)
    new = ck.fingerprint_info(other)
    assert ck.fingerprint(other) != fp
    diff = ck.diff_fingerprint_info(info, new)
    assert diff[0] == "config.json differs"
    assert any(line.startswith(f"{shard} differs (") for line in diff)
    assert f"tensor {DOWN} is gone" in diff


def test_fingerprint_of_registry_and_weightless_folders(tmp_path):
    a = ck.fingerprint_info("tiny-llama")
    assert a["weights"] == "none" and a["files"] == {}
    d = tmp_path / "bare"
    d.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama" / "config.json", d / "config.json")
    assert ck.fingerprint_info(d)["weights"] == "none"
    assert ck.fingerprint(d) != ck.fingerprint("tiny-llama")
    assert ck.diff_fingerprint_info(ck.fingerprint_info(d), {**ck.fingerprint_info(d), "weights": "safetensors"}) == \
        ["weights: none then, safetensors now"]
