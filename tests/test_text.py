"""Text in and out without a GPU: the folder's tokenizer, the chat template, incremental
detokenising (multi-byte characters split over tokens), the CLI's streaming printer, and the
errors of `mkc run` for text prompts where there is no tokenizer.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mkc.errors import MkcError
from mkc.text import Detokenizer, encode_prompts, load_tokenizer, read_prompts_file
from text_fixtures import save_tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return save_tokenizer(tmp_path_factory.mktemp("tok") / "model")


@pytest.fixture(scope="module")
def tok(tok_dir):
    return load_tokenizer(tok_dir)


def test_a_folder_without_a_tokenizer_has_none(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert load_tokenizer(tmp_path) is None and load_tokenizer(None) is None


def test_the_folders_tokenizer_round_trips_and_knows_its_eos(tok):
    text = "hello world, café 日本語 🙂"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.eos_token_id == 0


def test_chat_template_wraps_a_user_turn(tok, tok_dir):
    (ids,) = encode_prompts(tok, ["hello"], chat=True)
    assert tok.decode(ids) == "<|user|>hello<|end|><|assistant|>"
    plain = load_tokenizer(save_tokenizer(tok_dir.parent / "plain", chat=False))
    with pytest.raises(MkcError, match="needs a chat template"):
        encode_prompts(plain, ["hello"], chat=True)
    with pytest.raises(MkcError, match="no tokens"):
        encode_prompts(tok, [""])


@pytest.mark.parametrize("text", ["café crème", "日本語のテキスト", "emoji 🙂🚀 split", "the quick brown fox"])
def test_streamed_text_equals_decoding_everything_and_never_shows_half_a_character(tok, text):
    ids = tok(text)["input_ids"]
    assert any("\ufffd" in tok.decode([i]) for i in ids) or text.isascii()  # the case is real: bytes split
    d = Detokenizer(tok)
    pieces = [d.push([i]) for i in ids] + [d.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    d2 = Detokenizer(tok)  # several ids per push (on_step sees whatever the kernel published)
    assert d2.push(ids[:3]) + d2.push(ids[3:]) + d2.flush() == text


def test_special_tokens_are_not_printed(tok):
    ids = tok("hello")["input_ids"] + [tok.eos_token_id]
    d = Detokenizer(tok)
    assert "".join(d.push([i]) for i in ids) + d.flush() == "hello"


def test_prompts_file_one_row_per_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("first prompt\n\nsecond one\n", encoding="utf-8")
    assert read_prompts_file(f) == ["first prompt", "second one"]
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(MkcError, match="no prompts"):
        read_prompts_file(tmp_path / "empty.txt")
    with pytest.raises(MkcError, match="no such file"):
        read_prompts_file(tmp_path / "missing.txt")


def test_the_cli_streamer_prints_text_as_it_comes(tok):
    from mkc.run import Streamer

    ids = tok(" hello café")["input_ids"]
    out = io.StringIO()
    s = Streamer(tok, 1, out=out)
    printed = []
    for k in range(1, len(ids) + 1):  # on_step sees every row's new tokens so far
        s([ids[:k]])
        printed.append(out.getvalue())
    assert printed[-1] == " hello café" and printed[0] != printed[-1]
    assert s.finish([ids]) == [" hello café"] and out.getvalue() == " hello café\n"
    multi = io.StringIO()
    s2 = Streamer(tok, 2, out=multi)
    s2([tok("ab")["input_ids"], []])
    s2([tok("ab")["input_ids"], tok("cd")["input_ids"]])
    assert multi.getvalue().splitlines() == ["[row 0] 'ab'", "[row 1] 'cd'"]


def _args(**kw):
    base = dict(prompt=None, prompts_file=None, prompt_ids=None, chat=False)
    return types.SimpleNamespace(**{**base, **kw})


def test_prompt_rows_from_text_ids_or_the_default(tok_dir, tok):
    from mkc.run import prompt_rows

    rows, t = prompt_rows(_args(prompt=["hello", "café"]), tok_dir, "x")
    assert t is not None and [tok.decode(r) for r in rows] == ["hello", "café"]
    assert prompt_rows(_args(prompt_ids=["1,2", "3"]), None, "x") == ([[1, 2], [3]], None)
    assert prompt_rows(_args(), None, "x") == ([[1]], None)
    with pytest.raises(MkcError, match="not both"):
        prompt_rows(_args(prompt=["a"], prompt_ids=["1"]), tok_dir, "x")
    with pytest.raises(MkcError, match="--chat"):
        prompt_rows(_args(chat=True, prompt_ids=["1"]), tok_dir, "x")
    with pytest.raises(MkcError, match="comma-separated"):
        prompt_rows(_args(prompt_ids=["1,x"]), None, "x")


def mkc(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "mkc", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def registry_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("reg") / "build"
    r = mkc("compile", "tiny-llama", "--batch", "1,2", "--max-seq-len", "32", "--stop-after", "verify", "--out",
            str(out), "-q")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("argv, needles", [
    (["--prompt", "hello"], ["has no tokenizer", "--prompt-ids"]),
    (["--prompt-ids", "1", "--prompt-ids", "2", "--prompt-ids", "3"], ["3 rows do not fit", "largest compiled batch is 2"]),
    (["--prompt", "a", "--prompt-ids", "1"], ["not both"]),
    (["--prompts-file", "no-such-file.txt"], ["no such file"]),
    (["--prompt-ids", "1", "--batch", "4"], ["no batch 4", "1, 2"]),
    (["--prompt-ids", "1", "--greedy", "--temperature", "0.5"], ["--do-sample"]),
])
def test_run_refuses_what_it_cannot_do_in_one_line(registry_build, argv, needles):
    r = mkc("run", str(registry_build), *argv)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.fixture(scope="module")
def text_build(tmp_path_factory):
    """A save_pretrained folder (tiny Llama, the vocabulary of the test tokenizer) with its tokenizer."""
    import torch
    import transformers

    d = save_tokenizer(tmp_path_factory.mktemp("dl") / "llama-text")
    tok = transformers.AutoTokenizer.from_pretrained(d, local_files_only=True)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   eos_token_id=tok.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
    out = tmp_path_factory.mktemp("tb") / "build"
    r = mkc("compile", str(d), "--max-seq-len", "32", "--stop-after", "verify", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    return d, out


def test_text_prompts_of_a_folder_with_a_tokenizer_get_as_far_as_the_gpu(text_build):
    """Encoding, the chat template and the folder's stop token all pass on the CPU; only the GPU is missing."""
    from mkc.generation import generation_config_of, resolve_args

    d, out = text_build
    assert resolve_args(3, model_config=generation_config_of(d)).eos == (0,)  # the folder's EOS
    r = mkc("run", str(out), "--prompt", "hello café", "--chat", "--max-new-tokens", "8")
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        has_gpu = False
    if has_gpu:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 2 and "NVIDIA GPU" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = mkc("run", str(out), "--prompt", "x", "--temperature", "0.5", "--greedy")
    assert r.returncode == 2 and "--do-sample" in r.stderr


def test_a_transformers_text_streamer_gets_the_new_text(tok, capsys):
    """mk.generate(..., streamer=TextStreamer(tok)) prints as transformers' generate would."""
    from transformers import TextStreamer

    from test_generation import FakeMk

    class Replay(FakeMk):  # a kernel whose new tokens are a given text's ids, published one by one
        def decode(self, rows, max_new_tokens, *, on_step=None, **kw):
            new = tok(" café 日本 🙂")["input_ids"]
            for k in range(1, len(new) + 1):
                on_step([new[:k]])
            return [new]

    prompt = tok("hello")["input_ids"]
    out = Replay(B=1, V=len(tok)).generate([prompt], max_new_tokens=32, streamer=TextStreamer(tok, skip_prompt=True))
    assert capsys.readouterr().out == " café 日本 🙂\n"
    assert tok.decode(out[0, len(prompt):]) == " café 日本 🙂"
    with pytest.raises(MkcError, match="one row"):
        Replay(B=2).generate([[1], [2]], max_new_tokens=2, streamer=TextStreamer(tok))
