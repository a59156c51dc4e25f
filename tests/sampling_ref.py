"""numpy twin of the kernel's sampler (mkc/codegen/include/mkc/sampling.cuh), function by function.

The random numbers (Philox4x32-10, the uniform, the integer masses' arithmetic, the radix select)
are bit-exact with the device. expf/logf may differ from numpy's float32 exp/log in the last
place, so a draw or a top-p/min-p boundary can differ where two scores are that close.
"""

from __future__ import annotations

import numpy as np

M0, M1, W0, W1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """All four output words of Philox4x32-10 (arrays broadcast), as uint32."""
    c0, c1, c2, c3 = (np.asarray(x, dtype=np.uint64) & MASK for x in (c0, c1, c2, c3))
    k0, k1 = np.uint64(int(k0) & 0xFFFFFFFF), np.uint64(int(k1) & 0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        hi0, lo0, hi1, lo1 = p0 >> np.uint64(32), p0 & MASK, p1 >> np.uint64(32), p1 & MASK
        c0, c1, c2, c3 = (hi1 ^ c1 ^ k0) & MASK, lo1, (hi0 ^ c3 ^ k1) & MASK, lo0
        k0, k1 = (k0 + np.uint64(W0)) & MASK, (k1 + np.uint64(W1)) & MASK
    return tuple(x.astype(np.uint32) for x in (c0, c1, c2, c3))


def gumbel(seed: int, pos: int, b: int, v) -> np.ndarray:
    """The Gumbel noise of row b at position pos for vocabulary indices v (float32)."""
    v = np.asarray(v, dtype=np.uint64)
    x = philox4x32_10(v, b, pos, 0, seed & 0xFFFFFFFF, seed >> 32)[0]
    u = ((x >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 8388608.0)
    return -np.log(-np.log(u))


def order_key(f) -> np.ndarray:
    u = np.asarray(f, dtype=np.float32).view(np.uint32)
    return np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000)).astype(np.uint32)


def mass_of(z, zmax) -> np.ndarray:
    e = np.exp(np.asarray(z, dtype=np.float32) - np.float32(zmax)).astype(np.float32)
    return (e * np.float32(4294967296.0)).astype(np.uint64)


def tile_bin(zmax, z) -> np.ndarray:
    """sampling.cuh tile_bin: the bin of |zmax - z| (fp32), 16 an octave from 2^-8, 0 below it,
    255 from ~2^8 up."""
    d = (np.float32(zmax) - np.asarray(z, dtype=np.float32)).astype(np.float32)
    u = (d.view(np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    lo = 0x3B800000
    return np.where(u < lo, 0, np.minimum(1 + ((u - lo) >> 19), 255))


def tile_hist_cut(z: np.ndarray, cand: int = 64, pref: int = 16) -> int | None:
    """How many of an LM-head tile's logits z the histogram cut keeps (CodegenOptions.tile_hist):
    those of the bins above the first whose count from the top passes ``cand``; None where the
    kernel falls back to the radix select (fewer than ``pref`` kept, or a maximum that is not
    finite). Only for tiles of more than ``cand`` logits."""
    z = np.asarray(z, dtype=np.float32)
    zmax = z.max()
    if not np.isfinite(zmax):
        return None
    cum = np.cumsum(np.bincount(tile_bin(zmax, z), minlength=256))
    c = int(np.argmax(cum > cand))
    kept = int(cum[c - 1]) if c > 0 else 0
    return kept if kept >= pref else None


def radix_select(keys: np.ndarray, weights: np.ndarray, lo: int, target_k: int | None, p: float | None) -> int:
    """The largest key t (keys >= lo) whose weight over keys >= t reaches the target: k, or
    max(1, floor(p * total)) for masses (the device's four 8-bit passes give exactly this)."""
    keep = keys >= np.uint32(lo)
    keys, weights = keys[keep].astype(np.uint64), weights[keep].astype(np.uint64)
    if p is not None:
        target = max(1, int(float(np.float32(p)) * float(int(weights.sum()))))
    else:
        target = int(target_k)
    order = np.argsort(-keys.astype(np.int64), kind="stable")
    cum = np.cumsum(weights[order])  # < V * 2^32 + V: no overflow
    j = int(np.searchsorted(cum, np.uint64(target)))  # the first sorted position reaching the target
    return int(keys[order][j])


def threshold(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> int:
    """The key threshold of one row: tokens with order_key(logit / T) >= it may be drawn."""
    V = logits.shape[0]
    t = np.float32(temperature)
    z = (logits.astype(np.float32) / t).astype(np.float32)
    zmax = np.float32(logits.astype(np.float32).max() / t)
    keys = order_key(z)
    thr = 0
    if 0 < top_k < V:
        thr = radix_select(keys, np.ones_like(keys, dtype=np.uint64), thr, top_k, None)
    if np.float32(top_p) < np.float32(1.0):
        thr = radix_select(keys, mass_of(z, zmax), thr, None, top_p)
    if min_p > 0:
        thr = max(thr, int(order_key(np.float32(zmax + np.log(np.float32(min_p))))))
    return thr


def allowed(logits: np.ndarray, temperature: float, **filters) -> np.ndarray:
    """The tokens the sampler may draw for this row (bool [V])."""
    z = (logits.astype(np.float32) / np.float32(temperature)).astype(np.float32)
    return order_key(z) >= np.uint32(threshold(logits, temperature, **filters))


PD_ROUNDS = 6  # sampling.cuh: checks before the rejection sampler hands over to the exact path


def uniform64(seed: int, pos: int, b: int, r: int) -> int:
    """The 64-bit uniform of rejection round r (>= 1) of row b at position pos."""
    hi = int(philox4x32_10(r, b, pos, 1, seed & 0xFFFFFFFF, seed >> 32)[0])
    lo = int(philox4x32_10(r, b, pos, 2, seed & 0xFFFFFFFF, seed >> 32)[0])
    return hi << 32 | lo


def _row(logits: np.ndarray, temperature: float, top_p: float, min_p: float):
    """What sample_pdraw and sample_pwalk start from: V, z = logit / T, the largest z, the order keys,
    the integer masses, whether top-p filters, and the min-p key."""
    t = np.float32(temperature)
    z = (logits.astype(np.float32) / t).astype(np.float32)
    zmax = np.float32(logits.astype(np.float32).max() / t)
    use_p = np.float32(top_p) < np.float32(1.0)
    mkey = int(order_key(np.float32(zmax + np.log(np.float32(min_p))))) if min_p > 0 else 0
    return logits.shape[0], z, zmax, order_key(z), mass_of(z, zmax), use_p, mkey


def pdraw(logits: np.ndarray, temperature: float, seed: int, pos: int, b: int, top_p: float = 1.0,
          min_p: float = 0.0) -> int | None:
    """sample_pdraw (top-p and/or min-p without a top-k): the row's Gumbel-max winner if it lies in
    the kept set, else rounds that draw from the tokens ranked above the last draw by the inverse
    CDF of their integer masses (index order) until one lies in it; None after PD_ROUNDS checks
    (the exact path draws)."""
    V, z, zmax, keys, m, use_p, mkey = _row(logits, temperature, top_p, min_p)
    target = max(1, int(float(np.float32(top_p)) * float(int(m.sum()))))
    v = int(np.argmax((z + gumbel(seed, pos, b, np.arange(V))).astype(np.float32)))
    for r in range(1, PD_ROUNDS + 1):
        kv = int(keys[v])
        if not use_p and kv >= mkey:
            return v
        ranked = np.where(keys > np.uint32(kv), m, np.uint64(0))
        above = int(ranked.sum())
        if (not use_p or above < target) and kv >= mkey:
            return v
        if r == PD_ROUNDS or above == 0:
            break
        x = (uniform64(seed, pos, b, r) * above) >> 64
        v = int(np.searchsorted(np.cumsum(ranked), np.uint64(x), side="right"))
    return None


PD_HB = 128  # sampling.cuh lm_histogram: bins of 1/8 per LM-head tile


def tile_mass_sums(logits: np.ndarray, temperature: float, tiles, hb: int = PD_HB, s: int = 8) -> list[tuple[int, np.ndarray]]:
    """lm_histogram: per tile (A = floor(s max z), the sums from the top of the masses e^(z - A / s) of
    the bins z in [(A - j) / s, (A - j + 1) / s), the last bin everything below): word j holds bins
    0..j. s: bins a unit (sampling.cuh PD_S: 8, 16 with CodegenOptions.walk_fine)."""
    z = (logits.astype(np.float32) / np.float32(temperature)).astype(np.float32)
    out = []
    for r0, r1 in tiles:
        top = np.floor(np.float32(logits[r0:r1].max() / np.float32(temperature)) * np.float32(s))
        zt = z[r0:r1]
        j = np.minimum(top - np.floor(zt * np.float32(s)), hb - 1).astype(np.int64)
        m = np.exp(zt.astype(np.float64) - float(top) / s)
        out.append((int(top), np.cumsum(np.bincount(j, weights=m, minlength=hb))))
    return out


def mass_bounds(sums, zmax: float, zv: float, V: int, s: int = 8) -> tuple[float, float]:
    """pd_mass_bounds: the row's mass at least L and the mass ranked above zv at most U (mass_of
    units, widened by 1e-3), from tile_mass_sums (of s bins a unit)."""
    L = U = 0.0
    y = np.floor(np.float32(zv) * np.float32(s))
    for a, c in sums:
        sc = np.exp(a / s - zmax)
        L += c[-1] * sc
        j = a - y
        if j >= 0:
            U += c[int(min(j, len(c) - 1))] * sc
    return L * 2.0**32 * (1 - 1e-3) - V, U * 2.0**32 * (1 + 1e-3)


def mass_above_at_least(sums, zmax: float, zv: float, V: int, s: int = 8) -> float:
    """A lower bound on the mass ranked above zv (mass_of units): the bins wholly above zv's,
    j <= A - floor(s zv) - 1, and never the last bin (everything below the grid)."""
    la = 0.0
    y = np.floor(np.float32(zv) * np.float32(s))
    for a, c in sums:
        j = a - y - 1
        if j >= 0:
            la += c[int(min(j, len(c) - 2))] * np.exp(a / s - zmax)
    return la * 2.0**32 * (1 - 1e-3) - V


PD_M = 4  # CodegenOptions.pdraw_walk: each LM-head tile's best Gumbel scores per row
PW_ROUNDS = 16  # sampling.cuh: the walk's candidates taken before it hands over to the exact path
PD_HB_WALK = 64  # its bins (the room the candidates take in the tile's block)


def pwalk(logits: np.ndarray, temperature: float, seed: int, pos: int, b: int, tiles, top_p: float = 1.0,
          min_p: float = 0.0) -> int | None:
    """sampling.cuh sample_pwalk (CodegenOptions.pdraw_walk), top-p and/or min-p without a top-k: walk
    the tiles' best Gumbel scores (PD_M a tile, those below the min-p key dropped) from the top; the
    first token the mass bounds (or, where a token's bin straddles the threshold, a pass) put in the
    set is the draw: the exact path's Gumbel-max over the set. None where the walk gives up (a tile
    with no candidate left whose last one ranks above the largest head: its other tokens are unknown;
    or PW_ROUNDS tokens): the exact path then draws."""
    V, z, zmax, keys, m, use_p, mkey = _row(logits, temperature, top_p, min_p)
    p32 = float(np.float32(top_p))
    sums = tile_mass_sums(logits, temperature, tiles, PD_HB_WALK)
    L, _ = mass_bounds(sums, float(zmax), float(zmax), V)
    u_tot = sum(c[-1] * np.exp(a / 8.0 - float(zmax)) for a, c in sums) * 2.0**32 * (1 + 1e-3)
    score = (z + gumbel(seed, pos, b, np.arange(V))).astype(np.float32)
    kept, last = [], []  # per tile: its candidates at or above the min-p key; its PD_M-th (pack order)
    for r0, r1 in tiles:
        idx = np.arange(r0, r1)
        order = np.lexsort((idx, -score[r0:r1]))[:PD_M]
        cands = [(float(score[r0 + k]), -int(r0 + k)) for k in order]
        kept.append([c for c in cands if int(keys[-c[1]]) >= mkey])
        last.append(cands[-1] if len(cands) == PD_M else None)
    ptr = [0] * len(tiles)
    target = None  # exact, once a pass ran
    for _ in range(PW_ROUNDS):
        heads = [(kc[p_], t_) for t_, (p_, kc) in enumerate(zip(ptr, kept)) if p_ < len(kc)]
        gone = [lc for p_, kc, lc in zip(ptr, kept, last) if p_ >= len(kc) and lc is not None]
        if not heads or (gone and max(gone) > max(heads)[0]):
            return None  # nothing left, or an exhausted tile's next token may rank above the head
        (_, neg), t_ = max(heads)
        u = -neg
        ptr[t_] += 1
        if not use_p:
            return u
        _, U = mass_bounds(sums, float(zmax), float(z[u]), V)
        la = mass_above_at_least(sums, float(zmax), float(z[u]), V)
        if U < (p32 * L - 1 if target is None else target):
            return u
        if la >= (p32 * u_tot if target is None else target):
            continue
        target = max(1, int(p32 * float(int(m.sum()))))  # the pass: the exact target and mass above u
        if int(m[keys > keys[u]].sum()) < target:
            return u
    return None


def sample_row(logits: np.ndarray, temperature: float, seed: int, pos: int, b: int, walk: bool = False,
               **filters) -> int:
    """The kernel's draw for row b at position pos: greedy at temperature 0; without a top-k, with
    top-p and/or min-p, the rejection sampler (``pdraw``) first; else Gumbel-max of logit / T over
    the allowed set. ``walk`` (CodegenOptions.pdraw_walk): top-p and/or min-p walk (``pwalk``),
    whose draw is the exact path's, so there is no rejection sampler to model."""
    logits = np.asarray(logits, dtype=np.float32)
    if temperature == 0:
        return int(np.argmax(logits))
    V = logits.shape[0]
    top_k, top_p, min_p = filters.get("top_k", 0), filters.get("top_p", 1.0), filters.get("min_p", 0.0)
    walks = walk
    if not walks and not 0 < top_k < V and (np.float32(top_p) < np.float32(1.0) or min_p > 0):
        v = pdraw(logits, temperature, seed, pos, b, top_p=top_p, min_p=min_p)
        if v is not None:
            return v
    z = (logits / np.float32(temperature)).astype(np.float32)
    score = (z + gumbel(seed, pos, b, np.arange(logits.shape[0]))).astype(np.float32)
    score = np.where(allowed(logits, temperature, **filters), score, -np.inf)
    return int(np.argmax(score))


def torch_distribution(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0,
                       min_p: float = 0.0) -> np.ndarray:
    """What the draw should follow, written the way Hugging Face's warpers are (float64)."""
    import torch

    x = torch.tensor(logits, dtype=torch.float64) / temperature
    V = x.numel()
    if 0 < top_k < V:
        x = x.masked_fill(x < torch.topk(x, top_k).values[-1], -float("inf"))
    if top_p < 1:
        s, idx = torch.sort(x, descending=False)
        cum = s.softmax(-1).cumsum(-1)
        drop = cum <= (1 - top_p)
        drop[-1] = False
        x = x.masked_fill(drop.scatter(0, idx, drop), -float("inf"))
    if min_p > 0:
        p = x.softmax(-1)
        x = x.masked_fill(p < min_p * p.max(), -float("inf"))
    return x.softmax(-1).numpy()


def chi2_ok(counts: np.ndarray, probs: np.ndarray, z: float = 3.29) -> bool:
    """Pearson's chi-square of observed counts against probabilities, cells expected < 5 pooled
    into one, below the upper quantile at normal deviate z (3.29: p = 0.0005; Wilson-Hilferty)."""
    counts, probs = np.asarray(counts, dtype=float), np.asarray(probs, dtype=float)
    n = counts.sum()
    exp = probs * n
    big = exp >= 5
    obs_c, exp_c = list(counts[big]), list(exp[big])
    if (~big).any():
        obs_c.append(counts[~big].sum())
        exp_c.append(max(exp[~big].sum(), 1e-9))
    obs_c, exp_c = np.array(obs_c), np.array(exp_c)
    stat = float(((obs_c - exp_c) ** 2 / exp_c).sum())
    dof = max(1, len(obs_c) - 1)
    q = dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3
    return stat < q
