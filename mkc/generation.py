"""Generation on a Megakernel as ``transformers`` users know it: ``mk.generate(input_ids,
attention_mask=..., max_new_tokens=..., do_sample=..., ...)`` returns prompt + new ids, rows of
different lengths come LEFT-padded with an attention mask, and stopped rows are padded with
``pad_token_id``.

Underneath, every path ends in ``decode(mk, rows, ...)``: the kernel's own ``Megakernel.decode``
(sampling, stop tokens and streaming in the one-launch loop) where the runtime has it, else a
temporary greedy stand-in built on today's methods (``fallback_decode``). A long prompt first goes
through a batched torch prefill that writes the KV cache (``mkc.prefill``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from mkc.errors import MkcError

try:  # the kernel's sampling parameters (mkc/sampling.py); absent in trees without in-kernel sampling
    from mkc.sampling import Sampling
except ImportError:  # pragma: no cover - exercised only until sampling lands
    @dataclass(frozen=True)
    class Sampling:  # type: ignore[no-redef]
        """Stand-in with the fields of mkc.sampling.Sampling (temperature 0: greedy)."""
        temperature: float = 0.0
        top_k: int = 0
        top_p: float = 1.0
        min_p: float = 0.0
        seed: int = 0

        def check(self) -> list[str]:
            errs = []
            if self.temperature < 0:
                errs.append(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
            if self.top_k < 0:
                errs.append(f"top_k must be >= 0 (0: no limit), got {self.top_k}")
            if not 0 < self.top_p <= 1:
                errs.append(f"top_p must be in (0, 1], got {self.top_p}")
            if not 0 <= self.min_p <= 1:
                errs.append(f"min_p must be in [0, 1], got {self.min_p}")
            return errs

MAX_EOS = 4  # stop tokens the kernel compares against
GENERATE_ARGS = ("attention_mask", "max_new_tokens", "max_length", "do_sample", "temperature", "top_k", "top_p",
                 "min_p", "eos_token_id", "pad_token_id", "generation_config", "seed", "prefill", "streamer")


def greedy(sampling) -> bool:
    return sampling is None or float(sampling.temperature) == 0.0


# ---- arguments as transformers resolves them -----------------------------------------------------
@dataclass(frozen=True)
class GenerationArgs:
    max_new_tokens: int
    sampling: Sampling
    eos: tuple[int, ...]  # () : no stop token
    pad: int | None


def eos_list(eos) -> tuple[int, ...]:
    if eos is None:
        return ()
    vals = (int(eos),) if isinstance(eos, int) or hasattr(eos, "__index__") else tuple(int(e) for e in eos)
    if len(vals) > MAX_EOS:
        raise MkcError(f"eos_token_id has {len(vals)} tokens {list(vals)}; the kernel stops on at most {MAX_EOS}")
    return vals


def resolve_args(prompt_len: int, *, generation_config=None, model_config=None, seed=None, **given) -> GenerationArgs:
    """transformers 5.17's precedence: arguments given > ``generation_config`` > the model's
    ``generation_config.json`` (``model_config``) > the global defaults (max_length 20, greedy,
    temperature 1.0, top_k 50, top_p 1.0). The sampling knobs only count with ``do_sample``;
    ``max_new_tokens`` wins over ``max_length`` (prompt included); a missing ``pad_token_id``
    becomes the first EOS, as transformers does."""
    import copy

    from transformers import GenerationConfig

    gc = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig()
    try:
        if model_config is not None:
            gc.update(**model_config.to_dict(), defaults_only=True)
        gc.update(**GenerationConfig._get_default_generation_params(), defaults_only=True)
        gc.update(**{k: v for k, v in given.items() if v is not None})
    except ValueError as e:  # transformers' own validation (e.g. max_new_tokens <= 0)
        raise MkcError(f"invalid generation arguments: {(str(e).strip().splitlines() or [''])[0]}") from None
    if getattr(gc, "num_beams", 1) not in (None, 1):
        raise MkcError(f"num_beams={gc.num_beams}: mkc decodes greedily or by sampling, one sequence per row "
                       f"(beam search is not supported)")
    if gc.max_new_tokens is not None:
        n = int(gc.max_new_tokens)
    else:
        n = int(gc.max_length) - int(prompt_len)
        if n <= 0:
            raise MkcError(f"max_length={gc.max_length} leaves no room after the {prompt_len}-token prompt; pass "
                           f"max_new_tokens=N")
    if n <= 0:
        raise MkcError(f"max_new_tokens must be >= 1, got {n}")
    if gc.do_sample:
        t = float(gc.temperature)
        if t <= 0:
            raise MkcError(f"do_sample=True needs temperature > 0, got {t} (for greedy decoding pass do_sample=False)")
        top_p = float(gc.top_p if gc.top_p is not None else 1.0)
        sampling = Sampling(temperature=t, top_k=int(gc.top_k or 0), top_p=top_p, min_p=float(gc.min_p or 0.0),
                            seed=int(seed or 0))
    else:
        sampling = Sampling()
    errs = sampling.check()
    if errs:
        raise MkcError("invalid sampling parameters: " + "; ".join(errs))
    eos = eos_list(gc.eos_token_id)
    pad = gc.pad_token_id if gc.pad_token_id is not None else (eos[0] if eos else None)
    return GenerationArgs(n, sampling, eos, None if pad is None else int(pad))


# ---- a model folder's defaults, batch buckets -------------------------------------------------------
def pick_batch(have: list[int], rows: int) -> int:
    """The smallest compiled batch that holds ``rows`` rows (the rest of the batch is padding)."""
    if rows < 1:
        raise MkcError("no rows given: pass at least one prompt")
    fits = [b for b in sorted(have) if b >= rows]
    if not fits:
        raise MkcError(f"{rows} rows do not fit: the largest compiled batch is {max(have)} (batches "
                       f"{', '.join(map(str, sorted(have)))}); pass at most {max(have)} rows, or compile with "
                       f"--batch {','.join(map(str, sorted(set(have) | {rows})))}")
    return fits[0]


def generation_config_of(model_dir) -> object | None:
    """A model folder's generation defaults as a transformers GenerationConfig: its
    generation_config.json, else what its config.json says (eos/bos/pad ids); None without a folder."""
    if model_dir is None or not (Path(model_dir) / "config.json").is_file():
        return None
    from transformers import AutoConfig, GenerationConfig

    try:
        if (Path(model_dir) / "generation_config.json").is_file():
            return GenerationConfig.from_pretrained(str(model_dir), local_files_only=True)
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(model_dir), local_files_only=True))
    except Exception:  # noqa: BLE001 - a broken file only loses the defaults it holds (generate still runs)
        return None


# ---- rows ----------------------------------------------------------------------------------------
def strip_left_padding(input_ids, attention_mask=None) -> list[list[int]]:
    """Each row's real tokens: an attention mask must be LEFT padding (zeros, then ones), the way a
    transformers tokenizer pads for generation (``padding_side="left"``)."""
    import torch

    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise MkcError(f"input_ids must be [batch, length], got shape {list(ids.shape)}")
    if attention_mask is None:
        return [[int(t) for t in row] for row in ids.tolist()]
    mask = torch.as_tensor(attention_mask)
    if mask.dim() == 1:
        mask = mask[None]
    if tuple(mask.shape) != tuple(ids.shape):
        raise MkcError(f"attention_mask has shape {list(mask.shape)}, input_ids {list(ids.shape)}; they must match")
    rows = []
    for b, (row, m) in enumerate(zip(ids.tolist(), mask.bool().tolist())):
        n = sum(m)
        if n == 0:
            raise MkcError(f"row {b} of attention_mask is all zeros: every row needs at least one token")
        if any(m[: len(m) - n]) or not all(m[len(m) - n:]):
            raise MkcError(f"row {b} of attention_mask is not left padding (zeros, then ones): mkc takes left-padded "
                           f"batches; tokenize with padding_side='left'")
        rows.append([int(t) for t in row[len(m) - n:]])
    return rows


def check_rows(rows: Sequence[Sequence[int]], batch: int, vocab: int, max_seq_len: int, new_tokens) -> None:
    if not rows:
        raise MkcError("no prompts given: pass at least one row")
    if len(rows) > batch:
        raise MkcError(f"{len(rows)} rows, but the kernel was compiled for batch {batch}; compile with "
                       f"--batch {len(rows)} (or more), or pass at most {batch} rows")
    for b, r in enumerate(rows):
        if not r:
            raise MkcError(f"row {b} has no tokens: every row needs at least one")
        bad = [t for t in r if not 0 <= int(t) < vocab]
        if bad:
            raise MkcError(f"row {b} holds token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        n = new_tokens[b] if isinstance(new_tokens, (list, tuple)) else new_tokens
        if len(r) + int(n) - 1 > max_seq_len:  # the last new token is never fed back
            raise MkcError(f"row {b}: a {len(r)}-token prompt and {n} new tokens do not fit max_seq_len {max_seq_len}; "
                           f"compile with a larger --max-seq-len or ask for fewer tokens")


def _caps(max_new_tokens, n: int) -> list[int]:
    caps = list(max_new_tokens) if isinstance(max_new_tokens, (list, tuple)) else [int(max_new_tokens)] * n
    if len(caps) != n:
        raise MkcError(f"max_new_tokens has {len(caps)} values for {n} rows")
    return [int(c) for c in caps]


def _stop(tokens: list[int], cap: int, eos: tuple[int, ...]) -> list[int]:
    out = []
    for t in tokens[:cap]:
        out.append(t)
        if t in eos:
            break
    return out


# ---- decode: the kernel's, or the greedy stand-in --------------------------------------------------
def decode(mk, rows, max_new_tokens, *, start_pos: int = 0, eos_token_id=None, sampling=None,
           on_step: Callable | None = None) -> list[list[int]]:
    """``mk.decode`` where the runtime has it, else ``fallback_decode`` (greedy only)."""
    if hasattr(mk, "decode"):
        return mk.decode(rows, max_new_tokens, start_pos=start_pos, eos_token_id=eos_token_id, sampling=sampling,
                         on_step=on_step)
    return fallback_decode(mk, rows, max_new_tokens, start_pos=start_pos, eos_token_id=eos_token_id,
                           sampling=sampling, on_step=on_step)


def fallback_decode(mk, rows, max_new_tokens, *, start_pos: int = 0, eos_token_id=None, sampling=None,
                    on_step: Callable | None = None) -> list[list[int]]:
    """``Megakernel.decode``'s contract on today's runtime, greedy only: rows of one length run in
    ONE launch (as ``generate`` always did) and are cut at their stop token afterwards; rows of
    different lengths run one launch per step. ``on_step`` sees the tokens once at the end (per
    step for ragged rows). Temporary, until the kernel's decode lands."""
    import torch

    if not greedy(sampling):
        raise MkcError("sampling (do_sample / temperature > 0) needs the kernel's in-loop sampler, which this mkc "
                       "runtime does not have yet; decode greedily (do_sample=False, or leave out --do-sample)")
    B, n = mk.B, len(rows)
    caps, eos = _caps(max_new_tokens, n), eos_list(eos_token_id)
    N = max(caps)
    if start_pos == 0:
        mk.reset()
    lengths = {len(r) for r in rows}
    if len(lengths) == 1:
        r = lengths.pop()
        ids = torch.zeros((B, r), dtype=torch.int32)
        ids[:n] = torch.tensor([list(x) for x in rows], dtype=torch.int32)
        mk._set_forced(ids)
        mk._launch(r + N - 1, start_pos, r)
        toks = mk.driver.tensor(mk.tokens, (r - 1) * B, (N, B)).T.cpu().tolist()
        out = [_stop(toks[b], caps[b], eos) for b in range(n)]
        if on_step is not None:
            on_step(out)
        return out
    out: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    prev = torch.zeros(B, dtype=torch.int64)
    for k in range(max(len(r) for r in rows) + N - 1):
        tok = prev.clone()
        for b, r in enumerate(rows):
            if k < len(r):
                tok[b] = int(r[k])
        nxt = mk(tok, start_pos + k).argmax(-1).cpu()
        for b, r in enumerate(rows):
            if k >= len(r) - 1 and not done[b]:
                out[b].append(int(nxt[b]))
                done[b] = len(out[b]) >= caps[b] or out[b][-1] in eos
        prev = nxt
        if on_step is not None:
            on_step(out)
        if all(done):
            break
    return out


# ---- rows in, new tokens out: prefill, then decode --------------------------------------------------
def generate_rows(mk, rows, max_new_tokens, *, eos_token_id=None, sampling=None, on_step=None,
                  prefill: str = "auto") -> list[list[int]]:
    """The new tokens of each row (stop token included). ``prefill``: "auto" (torch for prompts of
    at least ``mkc.prefill.MIN_TOKENS`` tokens where the weights are torch tensors on the GPU),
    "torch" or "kernel" (the prompt token by token in the decode loop)."""
    from mkc import prefill as pf

    rows = [list(map(int, r)) for r in rows]
    check_rows(rows, mk.B, mk.V, mk.L, max_new_tokens)
    m = pf.prefill_length(mk, rows, prefill)
    if m:
        pf.torch_prefill(mk, rows, m)
        return decode(mk, [r[m:] for r in rows], max_new_tokens, start_pos=m, eos_token_id=eos_token_id,
                      sampling=sampling, on_step=on_step)
    return decode(mk, rows, max_new_tokens, start_pos=0, eos_token_id=eos_token_id, sampling=sampling,
                  on_step=on_step)


def generate(mk, input_ids, attention_mask=None, max_new_tokens=None, do_sample=None, temperature=None,
             top_k=None, top_p=None, min_p=None, eos_token_id=None, pad_token_id=None, generation_config=None,
             seed=None, *, max_length=None, prefill: str = "auto", streamer=None, **unknown):
    """``transformers``-style generate: ``input_ids`` [B, P] (LEFT-padded where ``attention_mask``
    says so) -> [B, P + N] int64 on the CPU, prompt then new ids, rows that stopped early padded
    with ``pad_token_id`` (default: the first EOS). Unset arguments take transformers' defaults
    (greedy; with ``do_sample``: temperature 1.0, top_k 50, top_p 1.0) after ``generation_config``
    and the model's ``generation_config.json`` (``mk.generation_config`` where loaded from a folder).
    ``seed`` seeds the kernel's sampler. ``streamer``: a transformers streamer (``TextStreamer``,
    ``TextIteratorStreamer``; one row), fed the prompt, then the new ids as the kernel publishes
    them, then ``end()``. ``generate(ids, N)``, the old form, is greedy with N new tokens."""
    import torch

    if isinstance(attention_mask, int) and not isinstance(attention_mask, bool):  # generate(ids, N)
        attention_mask, max_new_tokens = None, attention_mask if max_new_tokens is None else max_new_tokens
    if unknown:
        raise MkcError(f"generate() does not take {', '.join(sorted(unknown))}; it takes input_ids and "
                       f"{', '.join(GENERATE_ARGS)}")
    try:
        ids = torch.as_tensor(input_ids)
    except (ValueError, TypeError):
        raise MkcError("input_ids must be a [batch, length] tensor; rows of different lengths go LEFT-padded with "
                       "an attention_mask (tokenizer(..., padding=True) with padding_side='left')") from None
    ids2 = ids[None] if ids.dim() == 1 else ids
    rows = strip_left_padding(ids2, attention_mask)
    args = resolve_args(ids2.shape[1], generation_config=generation_config,
                        model_config=getattr(mk, "generation_config", None), seed=seed,
                        max_new_tokens=max_new_tokens, max_length=max_length, do_sample=do_sample,
                        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                        eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    on_step = None
    if streamer is not None:
        if len(rows) != 1:
            raise MkcError(f"a streamer takes one row (as in transformers), got {len(rows)}; stream rows one by one, "
                           f"or pass on_step to mkc.generation.generate_rows")
        streamer.put(torch.tensor([rows[0]]))
        sent = [0]

        def on_step(new_so_far):
            for t in list(new_so_far[0])[sent[0]:]:
                streamer.put(torch.tensor([int(t)]))
            sent[0] = len(new_so_far[0])

    new = generate_rows(mk, rows, args.max_new_tokens, eos_token_id=list(args.eos) or None, sampling=args.sampling,
                        on_step=on_step, prefill=prefill)
    if streamer is not None:
        on_step(new)
        streamer.end()
    return pad_output(ids2, new, args.pad)


def pad_output(prompt, new: list[list[int]], pad: int | None):
    """prompt [B, P] + each row's new ids, rows shorter than the longest padded with ``pad``."""
    import torch

    width = max(len(r) for r in new)
    if pad is None and any(len(r) != width for r in new):
        raise MkcError("rows stopped at different lengths and there is no pad_token_id (nor eos_token_id) to pad "
                       "them with; pass pad_token_id")
    tail = torch.full((len(new), width), pad if pad is not None else 0, dtype=torch.int64)
    for b, r in enumerate(new):
        tail[b, : len(r)] = torch.tensor(r, dtype=torch.int64)
    return torch.cat([torch.as_tensor(prompt).long().cpu(), tail], dim=1)
