"""How each fused op is cut into per-SM tasks.

GEMV-like ops tile output rows. A tile's time is proportional to its rows (every row streams a
whole weight row), so the most loaded worker runs ``ceil(tiles / workers) * rows``. For rows in
units of ``align`` this is minimal at ``rows = ceil(ceil(N / align) / workers) * align``, the largest
tile reaching the minimum (fewest tasks, least overhead). Rows are a multiple of 16 (an MMA tile
edge) unless a multiple of 8 strictly shortens the most loaded worker (N = 2048 on 304 CUs: 256
tiles of 8 rows instead of 128 of 16; on 108 SMs: 86 tiles of 24 rows instead of 64 of 32).

The qkv op has more structure (``qkv_tiles``): RoPE mixes the pair (i, i + hd/2) of a head, so a
task takes pairs, not rows: whole heads, a slice [p0, p1) of a head's hd/2 pairs, or a run of
pairs crossing one head boundary. Slices are a multiple of QKV_PAIR_ALIGN pairs unless a multiple
of 2 (whole 32-bit cache words) strictly shortens the most loaded worker, as for rows above.
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


QKV_PAIR_ALIGN = 8  # 8 pairs: 16 bf16 of a cache row in each rotary half


def qkv_tiles(n_q: int, n_kv: int, head_dim: int, workers: int, cross: bool = True) -> list[tuple[int, int, int, int]]:
    """Tiles ``(h0, h1, p0, p1)`` of the q|k|v head space (n_q + 2 * n_kv heads, the last n_kv are v).

    A tile is the run of pairs [h0 * hd/2 + p0, (h1 - 1) * hd/2 + p1) of the head-major pair space
    (``qkv_segments`` says which pairs of which heads): whole heads (p0, p1) == (0, hd/2) grouped
    several to a task, a slice of one head, or (``cross``) a run of at most hd/2 pairs that crosses
    one head boundary. The most loaded worker streams ``ceil(tasks / workers) * rows`` weight rows; we
    take the smallest rows per task whose tiles fit on ``workers`` in one wave (the largest slices
    reaching it: fewest tasks), else whole heads as ``head_tiles`` does. Slices within a head are
    tried first; a run crossing heads is taken only where it strictly shortens the most loaded
    worker (llama-3.2-1b on 132 SMs: 128 runs of 12 pairs, 24 rows, instead of 96 slices of 32
    rows). (A q/k RMSNorm over the head does not stop the slicing: lowering leaves q and k raw
    then, and attention norms whole heads.)
    """
    pairs = head_dim // 2
    n_heads = n_q + 2 * n_kv
    if n_heads >= workers or head_dim % 4:
        return [(h0, h1, 0, pairs) for h0, h1 in head_tiles(n_heads, workers)]

    def smallest(align: int) -> int:  # fewest pairs per slice whose tasks fit on the workers
        sizes = list(range(align, pairs, align)) + [pairs]
        return next(s for s in sizes if n_heads * _cdiv(pairs, s) <= workers)

    size = smallest(QKV_PAIR_ALIGN) if pairs % QKV_PAIR_ALIGN == 0 else pairs
    size = min(size, smallest(2))  # a multiple of 2 pairs only where it is strictly smaller
    total = n_heads * pairs
    run = 2 * _cdiv(_cdiv(total, workers), 2)  # even: whole 32-bit cache words
    if cross and run < size:
        out = []
        for s, e in _split(total, run):
            h1 = (e - 1) // pairs + 1
            out.append((s // pairs, h1, s % pairs, e - (h1 - 1) * pairs))
        return out
    return [(h, h + 1, p0, p1) for h in range(n_heads) for p0, p1 in _split(pairs, size)]


def qkv_segments(h0: int, h1: int, p0: int, p1: int, pairs: int) -> list[tuple[int, int, int, int]]:
    """A qkv tile as runs ``(ha, hb, pa, pb)`` of heads that take the same pairs [pa, pb): one run
    for whole heads or a slice of one head; for a tile crossing heads, its first head's tail, the
    whole heads between, its last head's start."""
    if h1 - h0 == 1 or (p0, p1) == (0, pairs):
        return [(h0, h1, p0, p1)]
    mid = [(h0 + 1, h1 - 1, 0, pairs)] if h1 - 1 > h0 + 1 else []
    return [(h0, h0 + 1, p0, pairs), *mid, (h1 - 1, h1, 0, p1)]


def embed_tiles(batch: int, hidden: int, workers: int, elem_bytes: int) -> list[tuple[int, int]]:
    """Column ranges of the embedding gather: one task unless it would move more than EMBED_TILE_BYTES."""
    moved = batch * hidden * (elem_bytes + 4)
    n = max(1, min(workers, _cdiv(moved, EMBED_TILE_BYTES)))
    cols = _cdiv(_cdiv(hidden, n), ROW_ALIGN) * ROW_ALIGN
    return _split(hidden, min(cols, hidden))


ATTN_MIN_POSITIONS = 64  # worst-case positions per attention split
ATTN_MAX_SPLIT = 8
ATTN_MIN_SPLIT = 4  # fewer would-be splits than this: none (o-proj's combine costs more than it saves)


def attn_splits(batch: int, n_kv: int, seq_len: int, workers: int) -> int:
    """Splits of the sequence per (batch row, kv head): enough attention tasks to spread over the
    workers (a split computes a partial softmax; o-proj combines them), each split at least
    ATTN_MIN_POSITIONS of the worst-case context, at most ATTN_MAX_SPLIT; none where the workers
    allow fewer than ATTN_MIN_SPLIT per (batch row, kv head). On the H200 (500 steps from position 0,
    cache 512): batch 1, 8 splits: llama-3.2-1b 1.006 -> 0.975 ms, qwen3-8b 4.943 -> 4.715 ms; batch
    8, 2 splits: llama-3.2-1b 1.399 -> 1.501 ms, qwen3-8b 6.175 -> 6.820 ms (o-proj re-reads 2x the
    attention output at batch 8), hence the minimum."""
    per = workers // (batch * n_kv)
    if per < ATTN_MIN_SPLIT:
        return 1
    return max(1, min(ATTN_MAX_SPLIT, per, seq_len // ATTN_MIN_POSITIONS))



def attn_active_splits(splits: int, T: int, per: int) -> int:
    """Splits that hold positions when T = pos + 1 positions are attended to: ceil(T / per), at least
    1 and at most ``splits`` (all of them with ``per`` 0)."""
    return splits if per <= 0 else max(1, min(splits, -(-T // per)))


def attn_split_range(s: int, splits: int, T: int, per: int) -> tuple[int, int]:
    """Positions [lo, hi) of split s of ``splits`` at T = pos + 1: the last ``attn_active_splits``
    splits share [0, T) evenly (so the last split always reaches pos), the ones before them are
    empty (0, 0). attention.cuh computes the same."""
    a = attn_active_splits(splits, T, per)
    j = s - (splits - a)
    return (0, 0) if j < 0 else (j * T // a, (j + 1) * T // a)
