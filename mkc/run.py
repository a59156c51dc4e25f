"""`mkc run DIR`: load a build directory's kernel on the GPU and decode greedily in one launch."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mkc.errors import MkcError
from mkc.pipeline import read_json


def weights_source(manifest: dict, weights: str | None, random_weights: bool, say) -> str:
    """Where the weights come from, checked on headers before any GPU work: a folder without a
    checkpoint needs --random-weights, a checkpoint must match the model (missing, truncated or
    mismatched tensors stop here), and one that differs from what the build was compiled from is
    reported line by line (refused when tensors or shapes differ)."""
    from mkc.capture.checkpoint import check_checkpoint, checkpoint_of, diff_fingerprint_info, fingerprint_info

    model = manifest.get("model_path") or manifest["model"]
    src = weights or model
    if not weights and manifest.get("model_path") and not Path(model).is_dir():
        raise MkcError(f"the build was compiled from {model}, which is not there any more; pass --weights DIR "
                       f"with that model's folder")
    ckpt = checkpoint_of(src)
    if ckpt is None:
        say(f"{src} is a registry model: seeded random weights")
        return src
    if not ckpt.has_weights:
        if not random_weights:
            from mkc.capture.checkpoint import require_weights

            require_weights(src)
        say(f"{ckpt.directory} has no weights: seeded random weights (--random-weights)")
        return src
    for n in check_checkpoint(src):
        say(n)
    old = manifest.get("fingerprint_info")
    if old:
        new = fingerprint_info(src)
        had_weights = old.get("weights") not in (None, "none")
        # a build of a registry config or a weightless folder has no tensors to compare: only its config
        diffs = diff_fingerprint_info(old, new) if had_weights else \
            (["config.json differs"] if old.get("config") != new.get("config") else [])
        for d in diffs:
            say(f"warning: the model differs from the one the build was compiled from: {d}")
        ot, nt = old.get("tensors") or {}, new.get("tensors") or {}
        if had_weights and (set(ot) != set(nt) or any(ot[k][1] != nt[k][1] for k in ot)):
            raise MkcError(f"the tensors in {ckpt.directory} are not those the build was compiled from (names or "
                           f"shapes differ, see above); compile the build again from this folder")
    return src


def check_free_memory(driver, bdirs: list[Path], say) -> None:
    """The device's free memory against the build's need (report.json's memory figures), before
    allocating: a clear refusal instead of an out-of-memory error halfway through the upload."""
    from mkc.verify.memory import gb

    need = 0
    for bdir in bdirs:
        rep = read_json(bdir / "report.json") if (bdir / "report.json").exists() else {}
        need = max(need, int((rep.get("memory") or {}).get("total") or 0))
    if not need:
        return
    try:
        free, total = driver.memory()
    except Exception:  # noqa: BLE001 - a driver that cannot say leaves the check to the allocator
        return
    if need > free:
        raise MkcError(f"this GPU has {gb(free)} free of {gb(total)}, but the build needs {gb(need)} (weights, KV "
                       f"cache, activations and tables); free memory on the GPU (other processes?), or compile "
                       f"with a smaller --batch or --max-seq-len")
    say(f"device memory: {gb(need)} needed, {gb(free)} free of {gb(total)}")


def build_dirs(root: Path) -> tuple[dict, dict[int, Path]]:
    """The manifest and the batch directories (batch -> dir) of a build, or of one batch directory."""
    if (root / "manifest.json").exists():
        manifest = read_json(root / "manifest.json")
        return manifest, {int(b): root / f"b{b}" for b in manifest["batches"]}
    if (root / "schedule.json").exists():
        parent = root.parent / "manifest.json"
        manifest = read_json(parent) if parent.exists() else {"model": read_json(root / "report.json")["model"]}
        return manifest, {int(read_json(root / "report.json")["batch"]) if (root / "report.json").exists()
                          else int(root.name[1:]): root}
    raise MkcError(f"{root} is not an mkc build directory (no manifest.json or schedule.json)")


def model_folder(manifest: dict, weights: str | None) -> Path | None:
    """The folder holding the model's tokenizer and generation_config.json: --weights, else the
    folder the build was compiled from; None for a registry model."""
    for d in (weights, manifest.get("model_path")):
        if d and (Path(d) / "config.json").is_file():
            return Path(d)
    return None


def parse_ids(text: str, what: str = "--prompt-ids") -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MkcError(f"{what} takes comma-separated token ids, got {text!r}") from None
    if not ids:
        raise MkcError(f"{what} needs at least one token id, got {text!r}")
    return ids


def parse_eos(text: str | None):
    """--eos-token-id: None (the model's default), [] ('none': never stop early) or ids."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return []
    return parse_ids(text, "--eos-token-id")


def prompt_rows(a, folder: Path | None, where: str):
    """(rows of ids, tokenizer or None): text prompts through the folder's tokenizer, or --prompt-ids."""
    from mkc.text import encode_prompts, load_tokenizer, no_tokenizer_error, read_prompts_file

    texts = list(getattr(a, "prompt", None) or [])
    if getattr(a, "prompts_file", None):
        texts += read_prompts_file(a.prompts_file)
    ids = list(getattr(a, "prompt_ids", None) or [])
    if texts and ids:
        raise MkcError("give text prompts (--prompt/--prompts-file) or --prompt-ids, not both")
    if getattr(a, "chat", False) and not texts:
        raise MkcError("--chat applies the chat template to text prompts: give --prompt or --prompts-file")
    if not texts:
        return [parse_ids(t) for t in (ids or ["1"])], None
    tok = load_tokenizer(folder)
    if tok is None:
        raise no_tokenizer_error(str(folder) if folder else f"{where} (a registry model)")
    return encode_prompts(tok, texts, chat=getattr(a, "chat", False)), tok


class Streamer:
    """``on_step`` for the CLI: prints each row's new text as it becomes printable. One row: the
    text as it comes; several: each piece on its own line, tagged with its row."""

    def __init__(self, tok, n_rows: int, out=None):
        import sys

        from mkc.text import Detokenizer

        self.rows = [Detokenizer(tok) for _ in range(n_rows)]
        self.seen = [0] * n_rows
        self.out = out or sys.stdout
        self.first_token_at: float | None = None

    def __call__(self, new_tokens) -> None:
        for b, toks in enumerate(new_tokens[: len(self.rows)]):
            if len(toks) > self.seen[b]:
                if self.first_token_at is None:
                    self.first_token_at = time.perf_counter()
                self._print(b, self.rows[b].push(list(toks[self.seen[b]:])))
                self.seen[b] = len(toks)

    def _print(self, b: int, text: str) -> None:
        if not text:
            return
        self.out.write(text if len(self.rows) == 1 else f"[row {b}] {text!r}\n")
        self.out.flush()

    def finish(self, new_tokens) -> list[str]:
        self(new_tokens)
        for b, d in enumerate(self.rows):
            self._print(b, d.flush())
        if len(self.rows) == 1:
            self.out.write("\n")
        return [d.text() for d in self.rows]


def run_cli(a) -> int:
    from mkc.backend import for_target
    from mkc.generation import generate_rows, generation_config_of, pick_batch, resolve_args
    from mkc.pipeline import StageLog, build_target

    say = StageLog().notice
    root = Path(a.dir)
    manifest, bdirs = build_dirs(root)
    model = manifest.get("model_path") or manifest["model"]
    folder = model_folder(manifest, a.weights)
    rows, tok = prompt_rows(a, folder, model)
    if getattr(a, "batch", None):
        if a.batch not in bdirs:
            raise MkcError(f"the build has no batch {a.batch}; it was compiled for batch sizes "
                           f"{', '.join(map(str, sorted(bdirs)))}")
        if len(rows) > a.batch:
            raise MkcError(f"{len(rows)} rows do not fit batch {a.batch}; pass at most {a.batch} rows")
        batch = a.batch
    else:
        batch = pick_batch(sorted(bdirs), len(rows))
    bdir = bdirs[batch]
    sampling_flags = [f for f, v in (("--temperature", a.temperature), ("--top-k", a.top_k), ("--top-p", a.top_p),
                                     ("--min-p", a.min_p)) if v is not None]
    if sampling_flags and a.do_sample is False:
        raise MkcError(f"{', '.join(sampling_flags)} set with --greedy: sampling parameters need --do-sample")
    gen = resolve_args(max(len(r) for r in rows), model_config=generation_config_of(folder), seed=a.seed,
                       max_new_tokens=a.max_new_tokens, do_sample=a.do_sample, temperature=a.temperature,
                       top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, eos_token_id=parse_eos(a.eos_token_id))
    if sampling_flags and not a.do_sample and float(gen.sampling.temperature) == 0.0:
        say(f"note: {', '.join(sampling_flags)} only apply with --do-sample; decoding greedily")
    source = weights_source(manifest, a.weights, getattr(a, "random_weights", False), say)
    backend = for_target(build_target(bdir))
    backend.check_runtime()  # before the weights are drawn or loaded

    import torch

    from mkc.capture.weights import load_weights
    from mkc.codegen.render import CodegenOptions
    from mkc.runtime import Megakernel

    check_free_memory(backend.driver(), [bdir], say)
    where = backend.torch_device() or "cpu"
    # seeded random weights are drawn on the GPU where torch has it (a qwen3-8b draw on the CPU takes minutes)
    weights = load_weights(source, torch.bfloat16, device=where, notify=lambda m: None)
    weights = {k: v.to(where, torch.bfloat16) for k, v in weights.items()}
    trace = getattr(a, "trace", None)
    mk = Megakernel.from_build_dir(bdir, weights, options=CodegenOptions(trace=True) if trace else None)
    say(f"{bdir.name}: {len(rows)} row(s) on batch {batch}" + (f" ({batch - len(rows)} padding)" if batch > len(rows)
                                                              else "") +
        (f", stop tokens {list(gen.eos)}" if gen.eos else ", no stop token") +
        (", greedy" if float(gen.sampling.temperature) == 0.0 else f", sampling {gen.sampling}"))
    if float(gen.sampling.temperature) != 0.0:
        say(f"{bdir.name}: building the kernel that samples (greedy steps run one without the sampler; "
            "compiled once, then cached)")
        mk.prepare_sampling(filtered=gen.sampling.filtered(mk.V))
    stream = Streamer(tok, len(rows)) if tok is not None else None
    t0 = time.perf_counter()
    new = generate_rows(mk, rows, gen.max_new_tokens, eos_token_id=list(gen.eos) or None, sampling=gen.sampling,
                        on_step=stream, prefill=getattr(a, "prefill", "auto"))
    dt = time.perf_counter() - t0
    if stream is not None:
        texts = stream.finish(new)
        if len(rows) > 1:
            for b, text in enumerate(texts):
                print(f"row {b}: {text}")
    else:
        for b, r in enumerate(new):
            print(f"  tokens (row {b}): {rows[b] + r}")
    n = sum(len(r) for r in new)
    ttft = f", first token after {1e3 * (stream.first_token_at - t0):.1f} ms" if stream and stream.first_token_at \
        else ""
    say(f"{bdir.name}: batch {batch}, {n} new token(s) over {len(rows)} row(s) in {1e3 * dt:.1f} ms "
        f"({1e3 * dt / max(1, max(len(r) for r in new)):.3f} ms/step){ttft}")
    if trace:
        from mkc.schedule.cost import CostModel, load_calibration
        from mkc.trace import calibration, format_prediction, format_summary, predicted_vs_measured, write_trace

        path = Path(trace)
        measured = mk.trace()
        summary = write_trace(mk.tg, mk.sched, measured, path)
        print(f"  trace of the first {summary['steps']} step(s): {summary['trace']} (ui.perfetto.dev), "
              f"{summary['png']}")
        print("  " + format_summary(summary).replace("\n", "\n  "))
        from mkc.trace import chain_summary, format_chain, format_marks, mark_summary

        print("  " + format_marks(mark_summary(mk.tg, measured, mk.trace_marks())).replace("\n", "\n  "))
        print("  " + format_chain(chain_summary(mk.tg, measured)).replace("\n", "\n  "))
        # measured task times back into the cost model: a calibration file for the next compile
        report = json.loads((bdir / "report.json").read_text()) if (bdir / "report.json").exists() else {}
        base = report.get("schedule", {}).get("kind_scale") or {}
        cal_path = path.with_name(f"{path.stem}.calibration.json")
        print("  fitting the cost model's constants to the trace (20-40 s) ...", flush=True)
        cal_path.write_text(json.dumps(calibration(mk.tg, mk.sched, measured, base), indent=1) + "\n")
        print(f"  calibration of the cost model: {cal_path} "
              f"(mkc compile {model} --batch {batch} --calibration {cal_path})")
        # the fitted constants read back as a compile would, then both models against the trace
        pvm = predicted_vs_measured(mk.tg, mk.sched, measured, load_calibration(cal_path), CostModel(kind_scale=base))
        print("  " + format_prediction(pvm).replace("\n", "\n  "))
    return 0
