"""How often top-p without a top-k needs a pass over the row (CPU, numpy; issue #16).

The argmax task's pass over a row's 128,256 logits costs ~77 us at batch 1 (H100 trace,
BENCHMARKS.md twenty-seventh session), so the passes a step are what top-p costs. For a flat row
(random weights: logit std 0.9, llama-3.2-1b's vocabulary in 132 LM-head tiles) this counts them
per step for:

- ``counts``: the bounds from per-bin counts (the kernels before the twenty-seventh session);
- ``mass``: the bounds from per-bin mass sums (sampling.cuh ``pd_mass_bounds``, the default), with
  the later rounds' draws checked against the exact target before another pass;
- ``walk``: argmax walks down the Gumbel order (CodegenOptions.pdraw_walk, the default), taking the
  first candidate the mass bounds put in the set and skipping those they put outside it. A pass runs
  only where a candidate's bin straddles the threshold, deciding it exactly (the draw is then the
  exact path's); on the walk's grid (64 bins of 1/8) and on walk_fine's (128 of 1/16).

    python scripts/pdraw_passes.py [--steps 300] [--top-p 0.9 0.5] [--std 0.9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import sampling_ref as ref  # noqa: E402

V, TILES = 128256, 132


def count_bounds(logits, zmax, zv, top_p, tiles) -> bool:
    """The counts' round-1 check: each bin valued at its lower edge (L) or upper edge (U)."""
    L = U = 0.0
    z = logits.astype(np.float32)
    for r0, r1 in tiles:
        a = np.floor(z[r0:r1].max() * np.float32(8))
        cnt = np.bincount(np.minimum(a - np.floor(z[r0:r1] * np.float32(8)), ref.PD_HB - 1).astype(np.int64),
                          minlength=ref.PD_HB)
        j = np.arange(ref.PD_HB)
        lo, hi = (a - j) / 8.0, (a - j + 1) / 8.0
        L += float((cnt[:-1] * np.exp(lo[:-1] - zmax)).sum())
        U += float((cnt * np.exp(np.minimum(hi, zmax) - zmax) * (hi > zv)).sum())
    return U * 2.0**32 * (1 + 1e-4) < top_p * (L * 2.0**32 * (1 - 1e-4) - V) - 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--top-p", type=float, nargs="+", default=[0.9, 0.5])
    ap.add_argument("--std", type=float, default=0.9, help="the row's logit standard deviation")
    a = ap.parse_args()
    rng = np.random.default_rng(2)
    per = -(-V // TILES)
    tiles = [(r, min(V, r + per)) for r in range(0, V, per)]
    z = (rng.standard_normal(V) * a.std).astype(np.float32)  # temperature 1: z is the logit
    zmax = float(z.max())
    keys, m = ref.order_key(z), ref.mass_of(z, np.float32(zmax))
    sums = ref.tile_mass_sums(z, 1.0, tiles)
    L, _ = ref.mass_bounds(sums, zmax, zmax, V)
    grids = {"walk": (ref.PD_HB_WALK, 8), "walk_fine": (128, 16)}  # the walk's bins; CodegenOptions.walk_fine's
    wsums = {k: ref.tile_mass_sums(z, 1.0, tiles, hb, s_) for k, (hb, s_) in grids.items()}
    wtot = {k: sum(c[-1] * np.exp(t / grids[k][1] - zmax) for t, c in w) * 2.0**32 * (1 + 1e-3) for k, w in wsums.items()}
    wL = {k: ref.mass_bounds(w, zmax, zmax, V, grids[k][1])[0] for k, w in wsums.items()}
    print("| top-p | winners in the set | passes a step: counts | mass sums | walk, 64 bins of 1/8 | walk, 128 of 1/16 |")
    print("|---|---|---|---|---|---|")
    for p in a.top_p:
        p32 = float(np.float32(p))
        target = max(1, int(p32 * float(int(m.sum()))))

        def inside(v):
            return int(m[keys > keys[v]].sum()) < target

        def rounds(v, checked):  # rejection rounds after a first pass: passes for the later checks
            n, r = 0, 1
            while not inside(v) and r < ref.PD_ROUNDS:
                w = np.where(keys > keys[v], m, 0).astype(np.float64)
                v = int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"))
                r += 1
                n += 0 if checked(v) else 1
            return n

        ins = counts = mass = 0
        walk = dict.fromkeys(grids, 0)
        for pos in range(a.steps):
            score = z + ref.gumbel(3, pos, 0, np.arange(V))
            v = int(np.argmax(score))
            ins += inside(v)
            if not count_bounds(z, zmax, float(z[v]), p32, tiles):
                counts += 1 + rounds(v, lambda _: False)
            if not ref.mass_bounds(sums, zmax, float(z[v]), V)[1] < p32 * L - 1:
                mass += 1 + rounds(v, lambda u: ref.mass_bounds(sums, zmax, float(z[u]), V)[1] < target)
            for k, (_, s_) in grids.items():
                tgt = None  # exact once a pass ran
                for u in np.argsort(score)[::-1][:8]:  # the walk: in, out, or a pass
                    if ref.mass_bounds(wsums[k], zmax, float(z[u]), V, s_)[1] < (p32 * wL[k] - 1 if tgt is None else tgt):
                        break
                    if ref.mass_above_at_least(wsums[k], zmax, float(z[u]), V, s_) >= (p32 * wtot[k] if tgt is None else tgt):
                        continue
                    walk[k] += 1  # a pass decides u exactly
                    tgt = target
                    if inside(u):
                        break
        n = a.steps
        print(f"| {p} | {ins / n:.3f} | {counts / n:.3f} | {mass / n:.3f} | {walk['walk'] / n:.3f} | {walk['walk_fine'] / n:.3f} |")


if __name__ == "__main__":
    main()
