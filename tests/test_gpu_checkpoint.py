"""A user's checkpoint folder end to end on the GPU (issue #15): a folder written by
``save_pretrained`` (real safetensors) is compiled, the build is copied elsewhere and run from
another working directory, and its logits match Hugging Face's on the same folder; the folder
with one tensor removed is refused at compile time.

Skipped where CUDA is absent (CI); run on the GPU machine by scripts/gpu_check.sh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_fixtures import cuda_ok, rel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_ok(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[1]
STEPS = 24


def _save_folder(name: str, folder: Path):
    """A bundled config's model with seeded random weights, saved as a user's download would be."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(ROOT / "models" / name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():  # realistic magnitudes: the default init leaves norms at 1 and matrices tiny
        for n, p in model.named_parameters():
            p.copy_(1 + 0.05 * torch.randn_like(p) if p.dim() == 1 else 0.02 * torch.randn_like(p))
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_saved_folder_compiles_copies_and_runs_from_elsewhere(name, tmp_path, monkeypatch):
    import torch
    import transformers

    import mkc
    from mkc.capture.weights import load_weights
    from mkc.pipeline import Options, StageLog, compile_model

    folder = _save_folder(name, tmp_path / "download" / name)
    built = compile_model(str(folder), tmp_path / "cpu-box" / "build", Options(batches=(1,), max_seq_len=64),
                          StageLog(quiet=True))
    manifest = json.loads((built / "manifest.json").read_text())
    assert Path(manifest["model_path"]) == folder.resolve()  # absolute: the build says what it was made from
    moved = shutil.copytree(built, tmp_path / "gpu-box" / "build")  # "copied to the GPU machine"
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)

    mk = mkc.load(moved, 1, weights=load_weights(str(folder)))
    m32 = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).cuda().eval()
    m16 = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.bfloat16).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, m32.config.vocab_size, (1, STEPS), device="cuda", generator=g)
    with torch.no_grad():
        ref = m32(ids, use_cache=False).logits.float()
        h16 = m16(ids, use_cache=False).logits.float()
    for t in range(STEPS):
        out = mk(ids[:, t], t)
        d_mk, d_hf = rel(out, ref[:, t]), rel(h16[:, t], ref[:, t])
        assert d_mk <= 2 * d_hf + 1e-3, f"{name} step {t}: mkc {d_mk:.3e} vs HF bf16 {d_hf:.3e}"

    # and through the CLI, from that other directory, on the folder's weights
    proc = subprocess.run([sys.executable, "-m", "mkc", "run", str(moved), "--prompt-ids", "1,2,3",
                           "--max-new-tokens", "4"], capture_output=True, text=True, timeout=600,
                          cwd=elsewhere, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tokens (row 0)" in proc.stdout


def test_folder_missing_a_tensor_fails_at_compile_time(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _save_folder("tiny-llama", tmp_path / "download" / "tiny-llama")
    ckpt = folder / "model.safetensors"
    tensors = load_file(ckpt)
    victim = next(k for k in sorted(tensors) if k.endswith("mlp.down_proj.weight"))
    del tensors[victim]
    save_file(tensors, ckpt, metadata={"format": "pt"})
    out = tmp_path / "build"
    proc = subprocess.run([sys.executable, "-m", "mkc", "compile", str(folder), "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert victim in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
