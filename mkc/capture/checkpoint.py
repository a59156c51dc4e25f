"""Which files of a model folder are its checkpoint, what their headers say, and loading them.

A Hugging Face folder can hold more than one copy of the weights (Mistral repos ship
``consolidated.safetensors`` beside the transformers shards) and files that are no weights of this
model at all (adapters, optimizer states). Only the transformers checkpoint is used, chosen the
way ``from_pretrained`` chooses it: the safetensors index, else ``model.safetensors`` or its
shards, else the same for ``pytorch_model.bin``. Checking reads the safetensors headers only
(8 bytes of length, then JSON), so a compile on a CPU box can reject a truncated download or a
missing tensor of a 16 GB checkpoint in milliseconds, long before the GPU box loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from mkc.errors import MkcError

ST_INDEX = "model.safetensors.index.json"
ST_SINGLE = "model.safetensors"
ST_SHARD = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"
BIN_SHARD = re.compile(r"pytorch_model-(\d{5})-of-(\d{5})\.bin")

# safetensors' own bound on the header; a larger length word means the file is not safetensors.
MAX_HEADER = 100_000_000

ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
            "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
# What mkc can turn into its bf16 weights; anything else (int8, fp8, packed 4-bit) is a quantized
# checkpoint whose scales mkc does not model.
FLOAT_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
_TORCH_TO_ST = {v: k for k, v in FLOAT_DTYPES.items()}

Expected = dict  # tensor name -> (shape, torch dtype)


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint files of a folder; ``files`` empty means the folder has no weights."""

    directory: Path
    format: str  # "safetensors", "bin" or "" (no weights)
    files: tuple[Path, ...] = ()
    index: Path | None = None
    weight_map: dict | None = None  # tensor name -> file name, from the index
    ignored: tuple[Path, ...] = ()  # weight-looking files that are not part of the checkpoint

    @property
    def has_weights(self) -> bool:
        return bool(self.files)

    def describe(self) -> str:
        """One line for ``describe``/``find``, e.g. '3 safetensors shards (model.safetensors.index.json), 2.1 GB'."""
        if not self.files:
            text = "no weights"
        else:
            size = sum(f.stat().st_size for f in self.files)
            kind = "safetensors" if self.format == "safetensors" else "PyTorch .bin"
            what = f"{self.files[0].name}" if len(self.files) == 1 else f"{len(self.files)} {kind} shards"
            text = what + (f" ({self.index.name})" if self.index else "") + f", {_size(size)}"
        if self.ignored:
            text += f"; not used: {', '.join(f.name for f in self.ignored)}"
        return text


@dataclass(frozen=True)
class TensorHeader:
    name: str
    dtype: str  # safetensors spelling: BF16, F16, F32, ...
    shape: tuple[int, ...]
    file: Path
    offsets: tuple[int, int] = (0, 0)  # data offsets within the file's data section (safetensors)


def _size(n: int) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


# ---- which files -------------------------------------------------------------------------------
def _read_index(directory: Path, name: str) -> dict:
    path = directory / name
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MkcError(f"cannot read the checkpoint index {path}: {e}") from None
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise MkcError(f"the checkpoint index {path} has no weight_map of tensor names to file names")
    for f in set(wm.values()):
        # an index is data from the internet: it must not point outside the folder
        if Path(f).name != f or f in (".", ".."):
            raise MkcError(f"the checkpoint index {path} names {f!r}, which is not a file in {directory}")
    missing = sorted(f for f in set(wm.values()) if not (directory / f).is_file())
    if missing:
        raise MkcError(f"the checkpoint index {path} names {len(missing)} file(s) that {directory} lacks: "
                       f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} (an incomplete download?)")
    return wm


def _shards(directory: Path, pattern: re.Pattern, kind: str) -> tuple[Path, ...]:
    found = sorted(p for p in directory.iterdir() if pattern.fullmatch(p.name))
    if not found:
        return ()
    totals = {pattern.fullmatch(p.name).group(2) for p in found}
    if len(totals) != 1:
        raise MkcError(f"{directory} holds {kind} shards of different sets ({', '.join(p.name for p in found)})")
    total = int(totals.pop())
    have = {int(pattern.fullmatch(p.name).group(1)) for p in found}
    lacking = sorted(set(range(1, total + 1)) - have)
    if lacking:
        raise MkcError(f"{directory} has {len(found)} of the {total} {kind} shards: shard(s) "
                       f"{', '.join(map(str, lacking))} missing (an incomplete download?)")
    return tuple(found)


def find_checkpoint(directory) -> Checkpoint:
    """The checkpoint files of ``directory``, as transformers would pick them (safetensors first)."""
    d = Path(directory)
    if not d.is_dir():
        raise MkcError(f"{d} is not a directory")
    candidates = sorted(p for p in d.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin"))
    ckpt = None
    for fmt, index, single, shard in (("safetensors", ST_INDEX, ST_SINGLE, ST_SHARD),
                                      ("bin", BIN_INDEX, BIN_SINGLE, BIN_SHARD)):
        if (d / index).is_file():
            wm = _read_index(d, index)
            files = tuple(d / f for f in sorted(set(wm.values())))
            ckpt = Checkpoint(d, fmt, files, d / index, wm)
        elif (d / single).is_file():
            ckpt = Checkpoint(d, fmt, (d / single,))
        else:
            files = _shards(d, shard, fmt)
            if files:
                ckpt = Checkpoint(d, fmt, files)
        if ckpt:
            break
    ckpt = ckpt or Checkpoint(d, "")
    ignored = tuple(p for p in candidates if p not in ckpt.files)
    return Checkpoint(ckpt.directory, ckpt.format, ckpt.files, ckpt.index, ckpt.weight_map, ignored)


def _directory(source) -> Path | None:
    """The folder behind a model argument, or None when the weights do not come from a folder."""
    from mkc.capture.registry import ModelSource, resolve

    if isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if p.is_file() and p.name == "config.json":
            return p.parent
        if p.is_dir():
            return p
    src = source if isinstance(source, ModelSource) else resolve(source)
    if src.registry or src.module is not None or src.directory is None:
        return None
    return src.directory


def checkpoint_of(source) -> Checkpoint | None:
    """The checkpoint of a model argument (a folder, a config.json path, a ModelSource, or anything
    ``resolve`` takes); None for registry names, configs and model objects, which have no folder."""
    d = _directory(source)
    return find_checkpoint(d) if d is not None else None


def describe_weights(source) -> str:
    """What ``mkc describe`` / ``find`` should say about a model's weights, in one line."""
    ck = checkpoint_of(source)
    if ck is None:
        return "seeded random weights (no checkpoint)"
    return ck.describe()


def require_weights(source, option: str = "--random-weights") -> Checkpoint | None:
    """Refuse a folder without a checkpoint, naming the folder and the opt-in to random weights.

    Registry names, configs and model objects pass (they have no folder: random weights or their
    own are their documented weights); so does a folder with a checkpoint.
    """
    ck = checkpoint_of(source)
    if ck is None or ck.has_weights:
        return ck
    seen = f" (it holds {', '.join(f.name for f in ck.ignored)}, which {'is' if len(ck.ignored) == 1 else 'are'} " \
           f"not a transformers checkpoint)" if ck.ignored else ""
    raise MkcError(
        f"{ck.directory} has no weights: no {ST_SINGLE}, model-XXXXX-of-YYYYY.safetensors shards, {ST_INDEX} "
        f"or {BIN_SINGLE}{seen}. Download the weights into it, or pass {option} to run with seeded random "
        f"weights.")


# ---- headers ------------------------------------------------------------------------------------
def _bad(path: Path, why: str) -> MkcError:
    return MkcError(f"{path} is not a usable safetensors file: {why}")


def _read_raw_header(path: Path) -> tuple[bytes, int, int]:
    """(header JSON bytes, header length, file size), checking the length word against the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _bad(path, f"it is {size} bytes, shorter than the 8-byte header length (empty or truncated)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or n > size - 8:
                why = f"its first 8 bytes give a header of {n} bytes but the file is {size} bytes"
                raise _bad(path, why + (" (truncated)" if n <= MAX_HEADER else " (not a safetensors file, or corrupt)"))
            raw = f.read(n)
    except OSError as e:
        raise MkcError(f"cannot read {path}: {e}") from None
    return raw, n, size


def read_safetensors_header(path) -> dict[str, TensorHeader]:
    """The tensors a safetensors file declares, read from its header only, checked against its size."""
    path = Path(path)
    raw, n, size = _read_raw_header(path)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(path, f"its header is not JSON ({e}); the file is corrupt or not safetensors") from None
    if not isinstance(header, dict):
        raise _bad(path, "its header is not a JSON object")
    out: dict[str, TensorHeader] = {}
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            ok = isinstance(dtype, str) and all(isinstance(s, int) and s >= 0 for s in shape) \
                and isinstance(b, int) and isinstance(e, int) and 0 <= b <= e
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise _bad(path, f"the header entry of {name!r} is malformed: {json.dumps(entry)[:200]}")
        numel = 1
        for s in shape:
            numel *= s
        if dtype in ITEMSIZE and e - b != numel * ITEMSIZE[dtype]:
            raise _bad(path, f"{name} is {dtype} {list(shape)} ({numel * ITEMSIZE[dtype]} bytes) but its data "
                             f"offsets span {e - b} bytes")
        out[name] = TensorHeader(name, dtype, shape, path, (b, e))
        end = max(end, e)
    if 8 + n + end > size:
        raise _bad(path, f"its header describes {8 + n + end} bytes but the file has {size}: it is truncated "
                         f"(an interrupted download?)")
    return out


def _bin_load(path: Path) -> dict:
    """A .bin state dict, unpickled with torch's restricted loader; memory-mapped, so no data is read
    until a tensor is touched."""
    try:
        try:
            sd = torch.load(str(path), weights_only=True, map_location="cpu", mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):  # only the legacy (pre-zip) format cannot be mapped
                raise
            sd = torch.load(str(path), weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - the unpickler raises many types; all mean "refused"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MkcError(f"{path} cannot be loaded safely (torch.load with weights_only=True refused it: {first}). "
                       f"mkc does not run pickled code from checkpoints; convert it to safetensors with a "
                       f"trusted transformers install (model.save_pretrained(dir, safe_serialization=True)).") from None
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise MkcError(f"{path} is not a state dict of tensors (torch.load gave {type(sd).__name__})")
    return sd


def read_headers(ckpt: Checkpoint) -> dict[str, TensorHeader]:
    """Every tensor of the checkpoint, by name, from headers only (for .bin: a memory-mapped load)."""
    out: dict[str, TensorHeader] = {}
    for f in ckpt.files:
        if ckpt.format == "safetensors":
            entries = read_safetensors_header(f)
        else:
            entries = {k: TensorHeader(k, _TORCH_TO_ST.get(v.dtype, str(v.dtype).replace("torch.", "")),
                                       tuple(v.shape), f) for k, v in _bin_load(f).items()}
        for name, h in entries.items():
            if ckpt.weight_map is not None and ckpt.weight_map.get(name) != f.name:
                continue  # a copy the index does not point at is not the checkpoint's
            out.setdefault(name, h)
    return out


# ---- checking -----------------------------------------------------------------------------------
def expected_tensors(source, dtype: torch.dtype = torch.bfloat16) -> Expected:
    """Name -> (shape, dtype) of every weight the model needs, from the architecture on the meta
    device (a tied LM head appears once, as the embedding)."""
    from mkc.capture.export import meta_model
    from mkc.capture.registry import resolve

    return {n: (tuple(p.shape), dtype) for n, p in meta_model(resolve(source), dtype).named_parameters()}


def _where_missing(ckpt: Checkpoint, name: str) -> str:
    if ckpt.weight_map is not None:
        if name in ckpt.weight_map:
            return f"{ckpt.index.name} puts it in {ckpt.weight_map[name]}, which does not hold it"
        return f"{ckpt.index.name} does not list it"
    return f"no file of the checkpoint ({', '.join(f.name for f in ckpt.files)}) holds it"


def _conversion_notices(ckpt: Checkpoint, headers: dict, names, dtype: torch.dtype) -> list[str]:
    """One notice per source dtype that loading rounds (fp16 or fp32 into bf16; widening is exact)."""
    by_dtype: dict[str, int] = {}
    for n in names:
        src = FLOAT_DTYPES.get(headers[n].dtype)
        if src is None or src == dtype:
            continue
        if dtype in (torch.float32, torch.float64) and torch.finfo(src).bits <= torch.finfo(dtype).bits:
            continue
        by_dtype[headers[n].dtype] = by_dtype.get(headers[n].dtype, 0) + 1
    out = []
    for st, count in sorted(by_dtype.items()):
        src = FLOAT_DTYPES[st]
        why = " (bf16 keeps 8 significant bits to fp16's 11: each weight is rounded)" \
            if src == torch.float16 and dtype == torch.bfloat16 else ""
        to = DTYPE_NAMES.get(dtype, str(dtype))
        out.append(f"{ckpt.directory}: {count} {DTYPE_NAMES[src]} weight(s) converted to {to}{why}")
    return out


def check_checkpoint(source, expected: Expected | None = None, dtype: torch.dtype = torch.bfloat16) -> list[str]:
    """Check a folder's checkpoint against the tensors a model needs, reading headers only.

    ``source``: a folder, a config.json path, or a model argument (``resolve``); ``expected``:
    name -> (shape, dtype), default ``expected_tensors(source, dtype)``. ``lm_head.weight`` may be
    absent when the config ties it to the embedding. Raises MkcError (exit 2) naming the file and
    tensor on a missing tensor, a shape mismatch, a non-float dtype, a truncated or garbage file;
    returns the notices loading will give (dtype conversions). A folder without a checkpoint
    raises as ``require_weights`` does; a source without a folder returns no notices.
    """
    ckpt = require_weights(source)
    if ckpt is None:
        return []
    return _check(source, ckpt, expected, dtype)[2]


def _check(source, ckpt: Checkpoint, expected: Expected | None, dtype: torch.dtype):
    """(expected, headers, notices) after the checks of ``check_checkpoint``."""
    if expected is None:
        expected = expected_tensors(source, dtype)
    headers = read_headers(ckpt)
    tied = _tied(source)
    missing = [n for n in expected if n not in headers and not (n == "lm_head.weight" and tied)]
    if missing:
        shown = "; ".join(f"{n} {list(expected[n][0])} ({_where_missing(ckpt, n)})" for n in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        hint = _missing_hint(headers, missing)
        raise MkcError(f"the checkpoint in {ckpt.directory} lacks {len(missing)} of the {len(expected)} weights "
                       f"the model needs: {shown}{more}.{hint}")
    for n, (shape, _) in expected.items():
        h = headers.get(n)
        if h is None:
            continue
        if tuple(h.shape) != tuple(shape):
            raise MkcError(f"weight {n} in {h.file} has shape {list(h.shape)}, but the model's config.json needs "
                           f"{list(shape)}: the weights and config.json are of different models")
        if h.dtype not in FLOAT_DTYPES:
            raise MkcError(f"weight {n} in {h.file} is {h.dtype}; mkc loads bf16, fp16 or fp32 weights only "
                           f"(a quantized checkpoint cannot be compiled: use the unquantized one)")
    notices = _conversion_notices(ckpt, headers, [n for n in expected if n in headers], dtype)
    return expected, headers, notices


def _tied(source) -> bool:
    from mkc.capture.registry import resolve

    try:
        config = resolve(source).config
    except MkcError:
        return False
    return bool(getattr(config, "tie_word_embeddings", False))


def _missing_hint(headers: dict, missing: list[str]) -> str:
    stems = {n.rsplit(".", 1)[0] for n in missing}
    if any(f"{s}.qweight" in headers or f"{s}.weight_packed" in headers for s in stems):
        return " The checkpoint is quantized (qweight/scales); mkc needs the unquantized bf16/fp16/fp32 weights."
    if all(n.startswith("model.") for n in missing) and any(n[len("model."):] in headers for n in missing):
        return (" Its names lack the 'model.' prefix transformers uses: it is not a transformers checkpoint of "
                "this model.")
    if missing == ["lm_head.weight"]:
        return (" The config does not tie the LM head to the embedding (tie_word_embeddings false); if this model "
                "ties them, config.json should say tie_word_embeddings: true.")
    return ""


# ---- loading ------------------------------------------------------------------------------------
def load_checkpoint(source, dtype: torch.dtype = torch.bfloat16, expected: Expected | None = None
                    ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Load the checkpoint's tensors in ``dtype``: (tensors by name, notices to show the user).

    Checks the headers first (``check_checkpoint``), then reads only the tensors ``expected``
    names (default: what the model needs), each from the one file the checkpoint assigns it.
    """
    ckpt = require_weights(source)
    if ckpt is None:
        raise MkcError(f"{source!r} has no checkpoint folder to load weights from")
    expected, headers, notices = _check(source, ckpt, expected, dtype)
    wanted = [n for n in expected if n in headers]
    by_file: dict[Path, list[str]] = {}
    for n in wanted:
        by_file.setdefault(headers[n].file, []).append(n)
    out: dict[str, torch.Tensor] = {}
    for f, names in by_file.items():
        try:
            if ckpt.format == "safetensors":
                from safetensors import safe_open

                with safe_open(str(f), framework="pt", device="cpu") as st:
                    for n in names:
                        out[n] = st.get_tensor(n).to(dtype)
            else:
                sd = _bin_load(f)
                for n in names:
                    out[n] = sd[n].to(dtype)
        except MkcError:
            raise
        except Exception as e:  # noqa: BLE001 - safetensors' errors are not MkcErrors
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise MkcError(f"cannot load {f}: {first}") from None
    return out, notices


# ---- fingerprint --------------------------------------------------------------------------------
def fingerprint_info(source) -> dict:
    """What a build was made from, cheaply: config.json's hash, and per checkpoint file its size and
    the hash of its header (names, dtypes, shapes, data offsets); no tensor data is read."""
    d = _directory(source)
    if d is None:
        from mkc.capture.registry import resolve

        src = resolve(source)
        cfg = src.config.to_json_string(use_diff=False) if hasattr(src.config, "to_json_string") else repr(src.config)
        return {"config": hashlib.sha256(cfg.encode()).hexdigest(), "weights": "none", "files": {}, "tensors": {}}
    try:
        cfg = hashlib.sha256((d / "config.json").read_bytes()).hexdigest()
    except OSError:
        cfg = ""
    ckpt = find_checkpoint(d)
    files, tensors = {}, {}
    for f in ckpt.files:
        size = f.stat().st_size
        if ckpt.format == "safetensors":
            # lenient on purpose: a fingerprint describes a folder, check_checkpoint judges it
            try:
                raw = _read_raw_header(f)[0]
                header = json.loads(raw.decode("utf-8"))
            except (MkcError, UnicodeDecodeError, ValueError):
                raw, header = b"", {}
            entries = {k: [v.get("dtype"), v.get("shape")] for k, v in header.items()
                       if k != "__metadata__" and isinstance(v, dict)} if isinstance(header, dict) else {}
        else:  # a pickle has no header: hash what the mapped load declares
            entries = {k: [_TORCH_TO_ST.get(v.dtype, str(v.dtype)), list(v.shape)] for k, v in _bin_load(f).items()}
            raw = json.dumps(entries, sort_keys=True).encode()
        files[f.name] = {"size": size, "header": hashlib.sha256(raw).hexdigest()}
        for name, (dt, shape) in entries.items():
            if ckpt.weight_map is None or ckpt.weight_map.get(name) == f.name:
                tensors.setdefault(name, [dt, shape, f.name])
    return {"config": cfg, "weights": ckpt.format or "none", "files": files, "tensors": tensors}


def fingerprint(source) -> str:
    """A short content hash of ``fingerprint_info(source)``; equal hashes: same config and headers."""
    info = fingerprint_info(source)
    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:16]


def diff_fingerprint_info(old: dict, new: dict, limit: int = 8) -> list[str]:
    """What differs between two ``fingerprint_info`` dicts, one line each (empty: nothing)."""
    out = []
    if old.get("config") != new.get("config"):
        out.append("config.json differs")
    if old.get("weights") != new.get("weights"):
        out.append(f"weights: {old.get('weights')} then, {new.get('weights')} now")
    of, nf = old.get("files", {}), new.get("files", {})
    for name in sorted(set(of) | set(nf)):
        if name not in nf:
            out.append(f"{name} is gone")
        elif name not in of:
            out.append(f"{name} is new")
        elif of[name] != nf[name]:
            a, b = of[name].get("size"), nf[name].get("size")
            out.append(f"{name} differs" + (f" ({a} bytes then, {b} now)" if a != b else " (same size, other header)"))
    ot, nt = old.get("tensors", {}), new.get("tensors", {})
    tdiff = []
    for name in sorted(set(ot) | set(nt)):
        if name not in nt:
            tdiff.append(f"tensor {name} is gone")
        elif name not in ot:
            tdiff.append(f"tensor {name} is new")
        elif ot[name][:2] != nt[name][:2]:
            tdiff.append(f"tensor {name}: {ot[name][0]} {ot[name][1]} then, {nt[name][0]} {nt[name][1]} now")
    out += tdiff[:limit]
    if len(tdiff) > limit:
        out.append(f"... and {len(tdiff) - limit} more tensor differences")
    return out
