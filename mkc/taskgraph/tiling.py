"""How each fused op is cut into per-SM tasks.

GEMV-like ops tile output rows. A tile's time is proportional to its rows (every row streams a
whole weight row), so the most loaded worker runs ``ceil(tiles / workers) * rows``. For rows in
units of ``align`` this is minimal at ``rows = ceil(ceil(N / align) / workers) * align``, the largest
tile reaching the minimum (fewest tasks, least overhead). Rows are a multiple of 16 (an MMA tile
edge) unless a multiple of 8 strictly shortens the most loaded worker (N = 2048 on 304 CUs: 256
tiles of 8 rows instead of 128 of 16; on 108 SMs: 86 tiles of 24 rows instead of 64 of 32).
"""

from __future__ import annotations

ROW_ALIGN = 16
EMBED_TILE_BYTES = 64 * 1024  # bytes one embed task moves before we split the columns further


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _split(n: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def row_tile_size(n: int, workers: int, align: int = ROW_ALIGN) -> int:
    best = _cdiv(_cdiv(n, align), workers) * align
    if align % 2 == 0:
        finer = _cdiv(_cdiv(n, align // 2), workers) * (align // 2)
        best = min(best, finer)
    return max(1, min(best, n))


def row_tiles(n: int, workers: int, align: int = ROW_ALIGN) -> list[tuple[int, int]]:
    """Half-open row ranges covering [0, n), balanced over ``workers``."""
    return _split(n, row_tile_size(n, workers, align))


def head_tiles(n_heads: int, workers: int) -> list[tuple[int, int]]:
    """Whole heads per task (RoPE and q/k norm need a whole head): as many tasks as workers allow."""
    return _split(n_heads, _cdiv(n_heads, workers))


def embed_tiles(batch: int, hidden: int, workers: int, elem_bytes: int) -> list[tuple[int, int]]:
    """Column ranges of the embedding gather: one task unless it would move more than EMBED_TILE_BYTES."""
    moved = batch * hidden * (elem_bytes + 4)
    n = max(1, min(workers, _cdiv(moved, EMBED_TILE_BYTES)))
    cols = _cdiv(_cdiv(hidden, n), ROW_ALIGN) * ROW_ALIGN
    return _split(hidden, min(cols, hidden))
