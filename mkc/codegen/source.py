"""The device headers (``mkc/codegen/include/mkc/``) inlined into one self-contained kernel source.

The emitted ``kernel.cu`` / ``kernel.hip`` must stand alone: the cubin cache keys on its text and
the device machine compiles that text without this package next to it. So the manifest's
``#include "mkc/..."`` lines are replaced by the files they name, recursively, the way the
preprocessor would for files guarded by ``#pragma once``: each such file once, at its first
include, with the pragma dropped. ``<system>`` includes and any quoted include outside ``mkc/``
are left for the compiler.

``mkc/config.cuh`` is not a file: it is the rendered prologue of the manifest (constants, enums,
the dialect). The manifest carries it inline and passes it as already included, so the headers'
own ``#include "mkc/config.cuh"`` lines (which let each header compile on its own against a
rendered prologue, see tests/test_headers.py) disappear from the output.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkc.errors import MkcError

INCLUDE_DIR = Path(__file__).parent / "include"
CONFIG_HEADER = "mkc/config.cuh"

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"(mkc/[^"]+)"[^\n]*$', re.M)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*(//[^\n]*)?\n?", re.M)


class SourceError(MkcError):
    """A device header is missing or includes itself (a packaging or header bug)."""

    exit_code = 1


def headers(include_dir: Path = INCLUDE_DIR) -> list[str]:
    """Every header under ``include_dir`` as its include name (``mkc/common.cuh``), sorted."""
    return sorted(p.relative_to(include_dir).as_posix() for p in include_dir.rglob("*.cuh"))


def inline(text: str, include_dir: Path = INCLUDE_DIR, *, included: tuple[str, ...] = (CONFIG_HEADER,),
           marks: bool = True) -> str:
    """``text`` with every ``#include "mkc/..."`` resolved against ``include_dir``.

    ``included`` names headers taken as already included (dropped wherever they appear).
    ``marks`` puts a ``// ---- mkc/x.cuh ----`` line where each inlined file starts, so a compiler
    message about the emitted source can be traced back to its header.
    """
    seen = set(included)
    return _expand(text, Path(include_dir), seen, (), marks)


def _expand(text: str, include_dir: Path, seen: set[str], stack: tuple[str, ...], marks: bool) -> str:
    out, at = [], 0
    resumed = True  # a header's text after one of its includes gets its name again

    def keep(chunk: str) -> None:
        nonlocal resumed
        if marks and stack and not resumed and chunk.strip():
            out.append(f"// ---- {stack[-1]} (continued) ----\n")
            resumed = True
        out.append(chunk)

    for m in _INCLUDE.finditer(text):
        keep(text[at:m.start()])
        at = m.end() + (1 if text[m.end():m.end() + 1] == "\n" else 0)
        name = m.group(1)
        if name in stack:
            raise SourceError(f"{name} includes itself: {' -> '.join((*stack, name))}")
        if name in seen:
            continue
        path = include_dir / name
        if not path.is_file():
            where = f" (from {stack[-1]})" if stack else ""
            raise SourceError(f"device header {name}{where} not found in {include_dir}")
        body = path.read_text()
        once = _PRAGMA_ONCE.search(body) is not None
        if once:
            seen.add(name)
            body = _PRAGMA_ONCE.sub("", body, count=1)
        body = _expand(body, include_dir, seen, (*stack, name), marks)
        if marks:
            out.append(f"// ---- {name} ----\n")
        out.append(body if body.endswith("\n") else body + "\n")
        resumed = False
    keep(text[at:])
    return "".join(out)
