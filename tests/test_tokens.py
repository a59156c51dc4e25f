"""The token end, CPU tier: the sampler's numpy reference (Philox known answers, Gumbel-max
statistics, the filtered sets against Hugging Face's warpers, the radix select's passes), decode's
argument checking and early-exit bookkeeping, the rendered kernel, and decode end to end through
the AMD driver's stand-in with a Python kernel that plays the stop rule."""

from __future__ import annotations

import numpy as np
import pytest

import sampling_ref as ref
from codegen_fixtures import rr_schedule, shape_graph, taskgraph
from mkc.codegen import tables as T
from mkc.decode import plan_decode, row_outputs, steps_run
from mkc.errors import MkcError
from mkc.sampling import Sampling


# ---- random numbers and the sampler's reference ----------------------------------------------------
def test_philox_matches_random123_known_answers():
    assert ref.philox4x32_10(0, 0, 0, 0, 0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    f = 0xFFFFFFFF
    assert ref.philox4x32_10(f, f, f, f, f, f) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert ref.philox4x32_10(0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def test_gumbel_noise_is_keyed_by_seed_position_row_and_index():
    g = ref.gumbel(7, 3, 1, np.arange(64))
    assert g.dtype == np.float32 and np.isfinite(g).all() and len(set(g.tolist())) == 64
    assert np.array_equal(g, ref.gumbel(7, 3, 1, np.arange(64)))
    for other in (ref.gumbel(8, 3, 1, np.arange(64)), ref.gumbel(7, 4, 1, np.arange(64)),
                  ref.gumbel(7, 3, 0, np.arange(64)), ref.gumbel(7 + 2**32, 3, 1, np.arange(64))):
        assert not np.array_equal(g, other)


@pytest.mark.parametrize("filters", [{}, {"top_k": 3}, {"top_p": 0.7}, {"min_p": 0.2}, {"top_k": 5, "top_p": 0.8},
                                     {"top_p": 0.3, "min_p": 0.05}])
def test_reference_draws_follow_the_warped_distribution(filters):
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal(12) * 1.5).astype(np.float32)
    T_ = 0.8
    draws = np.array([ref.sample_row(logits, T_, seed=5, pos=p, b=0, **filters) for p in range(6000)])
    probs = ref.torch_distribution(logits, T_, **filters)
    assert set(draws.tolist()) <= set(np.flatnonzero(probs > 0).tolist())  # never outside the set
    assert ref.chi2_ok(np.bincount(draws, minlength=12).astype(float), probs)


def test_rejection_sampler_takes_the_winner_in_the_set_and_draws_again_outside_it():
    """Without a top-k the row's Gumbel-max winner is the draw when it lies in the kept set (then it
    is the exact path's draw too); otherwise later rounds draw, inside the set. On a flat row with
    top-p 0.5 both happen."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(3000) * 0.5).astype(np.float32)
    T_, p = 0.9, 0.5
    ok = ref.allowed(logits, T_, top_p=p)
    z = (logits / np.float32(T_)).astype(np.float32)
    first = later = 0
    for pos in range(300):
        score = (z + ref.gumbel(11, pos, 1, np.arange(logits.size))).astype(np.float32)
        winner, exact = int(np.argmax(score)), int(np.argmax(np.where(ok, score, -np.inf)))
        v = ref.pdraw(logits, T_, 11, pos, 1, top_p=p)
        assert v is not None and ok[v]
        if ok[winner]:
            assert v == winner == exact
            first += 1
        else:
            later += 1
    assert 100 < first < 200 and later > 100, (first, later)


@pytest.mark.parametrize("scale", [0.9, 4.0])  # a flat row (random weights) and a peaked one
@pytest.mark.parametrize("hb,s", [(128, 8), (64, 8), (128, 16)])  # the default grid, the walk's, walk_fine's
def test_tile_mass_bounds_accept_only_draws_in_the_top_p_set(scale, hb, s):
    """The bounds from the LM-head tiles' mass sums accept a token only where the pass would, in
    round 1 (the row's Gumbel-max winner, against p L - 1) and in later rounds (any token, against
    the exact target), and round 1 accepts most winners that lie in the set; the lower bound on the
    mass above a token (the walk's skip) never exceeds it."""
    rng = np.random.default_rng(5)
    V, T_ = 12000, 0.8
    logits = (rng.standard_normal(V) * scale).astype(np.float32)
    tiles = [(a, min(V, a + 97)) for a in range(0, V, 97)]
    sums = ref.tile_mass_sums(logits, T_, tiles, hb, s)
    z = (logits / np.float32(T_)).astype(np.float32)
    zmax = np.float32(logits.max() / np.float32(T_))
    keys, m = ref.order_key(z), ref.mass_of(z, zmax)
    for p in (0.5, 0.9, 0.99):
        target = max(1, int(float(np.float32(p)) * float(int(m.sum()))))
        accepted = inside = 0
        for pos in range(200):
            v = int(np.argmax(z + ref.gumbel(3, pos, 0, np.arange(V))))
            exact = int(m[keys > keys[v]].sum()) < target
            L, U = ref.mass_bounds(sums, float(zmax), float(z[v]), V, s)
            first = U < float(np.float32(p)) * L - 1
            assert ref.mass_above_at_least(sums, float(zmax), float(z[v]), V, s) <= int(m[keys > keys[v]].sum())
            assert exact or not first, (p, pos)
            accepted += first
            inside += exact
            # a later round's draw (any token) checked against the exact target
            w = int(rng.integers(V))
            _, Uw = ref.mass_bounds(sums, float(zmax), float(z[w]), V, s)
            ok = int(m[keys > keys[w]].sum()) < target
            assert ok or not Uw < target, (p, pos, w)
        assert accepted >= 0.8 * inside, (p, accepted, inside)


@pytest.mark.parametrize("scale", [0.9, 2.0, 4.0])
def test_walk_draws_the_exact_paths_token(scale):
    """The walk down the tiles' best Gumbel scores (CodegenOptions.pdraw_walk: top-p, min-p, both)
    draws the exact path's token (Gumbel-max over the set) whenever it does not give up, and gives
    up on few rows (a tile's candidates all taken) where the set holds much of the mass; a tight
    min-p set on a flat row (min-p 0.3: a few dozen tokens) gives up more often and is only checked
    for exactness."""
    rng = np.random.default_rng(int(scale * 10))
    V, T_ = 12000, 0.8
    logits = (rng.standard_normal(V) * scale).astype(np.float32)
    tiles = [(a, min(V, a + 97)) for a in range(0, V, 97)]
    z = (logits / np.float32(T_)).astype(np.float32)
    walked = total = 0
    for f in (dict(top_p=0.5), dict(top_p=0.9), dict(top_p=0.99), dict(min_p=0.05), dict(min_p=0.3),
              dict(top_p=0.9, min_p=0.05), dict(top_p=0.5, min_p=0.2)):
        ok = ref.allowed(logits, T_, **f)
        wide = f.get("min_p", 0.0) <= 0.05
        for pos in range(40):
            score = (z + ref.gumbel(5, pos, 0, np.arange(V))).astype(np.float32)
            exact = int(np.argmax(np.where(ok, score, -np.inf)))
            v = ref.pwalk(logits, T_, 5, pos, 0, tiles, **f)
            total += wide
            if v is not None:
                assert v == exact, (f, pos, v, exact)
                walked += wide
            assert ref.sample_row(logits, T_, 5, pos, 0, walk=True, **f) == exact
    assert walked >= 0.9 * total, (walked, total)


@pytest.mark.parametrize("size", [3, 4, 5])
def test_walk_on_tiles_of_at_most_a_few_tokens(size):
    """Tiles of fewer than PD_M tokens hand the walk all of theirs (no unknown token behind their
    last), tiles of PD_M or a few more run out early: the walk still draws the exact path's token,
    and with every token known (size 3) it does not give up on these rows."""
    rng = np.random.default_rng(size)
    V, T_ = 600, 0.8
    logits = (rng.standard_normal(V) * 2).astype(np.float32)
    z = (logits / np.float32(T_)).astype(np.float32)
    tiles = [(a, min(V, a + size)) for a in range(0, V, size)]
    for f in (dict(top_p=0.5), dict(min_p=0.1), dict(top_p=0.9, min_p=0.05)):
        ok = ref.allowed(logits, T_, **f)
        for pos in range(30):
            score = (z + ref.gumbel(5, pos, 0, np.arange(V))).astype(np.float32)
            exact = int(np.argmax(np.where(ok, score, -np.inf)))
            v = ref.pwalk(logits, T_, 5, pos, 0, tiles, **f)
            assert v == exact or (v is None and size > 3), (f, pos, v, exact)


@pytest.mark.parametrize("seed", range(6))
def test_filtered_sets_equal_the_hugging_face_warpers(seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(300) * 3).astype(np.float32)
    for f in ({"top_k": 1}, {"top_k": 17}, {"top_p": 0.05}, {"top_p": 0.9}, {"min_p": 0.05},
              {"top_k": 40, "top_p": 0.5, "min_p": 0.01}):
        got = ref.allowed(logits, 0.7, **f)
        want = ref.torch_distribution(logits, 0.7, **f) > 0
        assert np.array_equal(got, want), f


def _device_radix_select(keys, weights, lo, k, p):
    """The device's four 8-bit passes, as sampling.cuh writes them (bins scanned from the top)."""
    prefix, above, target = 0, 0, k
    for shift in (24, 16, 8, 0):
        hist = np.zeros(256, dtype=object)
        for key, w in zip(keys.tolist(), weights.tolist()):
            if key < lo or (shift < 24 and (key >> (shift + 8)) != (prefix >> (shift + 8))):
                continue
            hist[(key >> shift) & 255] += int(w)
        if shift == 24 and p is not None:
            target = max(1, int(float(np.float32(p)) * float(sum(hist))))
        acc, digit = above, 0
        for d in range(255, -1, -1):
            if acc + hist[d] >= target:
                digit = d
                break
            acc += hist[d]
        prefix |= digit << shift
        above = acc
    return prefix


def test_device_radix_passes_equal_the_sorted_reference():
    rng = np.random.default_rng(3)
    for trial in range(20):
        z = (rng.standard_normal(200) * (0.01 if trial % 3 == 0 else 2)).astype(np.float32)
        z[:5] = z[5]  # ties
        keys = ref.order_key(z)
        mass = ref.mass_of(z, z.max())
        ones = np.ones(200, dtype=np.uint64)
        k = int(rng.integers(1, 199))
        tk = ref.radix_select(keys, ones, 0, k, None)
        assert _device_radix_select(keys, ones, 0, k, None) == tk
        assert _device_radix_select(keys, mass, tk, None, 0.6) == ref.radix_select(keys, mass, tk, None, 0.6)
        assert (keys >= tk).sum() >= k and (keys > tk).sum() < k


def _device_hist_select(z, zmax, lo, k, p, nb, levels=3, dmax=32.0):
    """sampling.cuh's hist_select in numpy: bins of d = zmax - z (fp32), the reaching bin collected and
    sorted when it holds at most ``nb`` tokens, else split again; the radix select last. Returns the
    threshold and the path taken ("collect<level>", "radix", "all")."""
    f32 = np.float32
    keys = ref.order_key(z)
    d = (f32(zmax) - z).astype(f32)
    w = ref.mass_of(z, zmax) if p is not None else np.ones(len(z), dtype=np.uint64)
    member = keys >= np.uint32(lo)
    cur_lo, cur_sc, above, target = f32(0), f32(f32(nb) / f32(dmax)), 0, k
    for nl in range(levels):
        with np.errstate(invalid="ignore"):
            x = np.floor(((d - cur_lo).astype(f32) * cur_sc).astype(f32))
            b_all = np.where(x < 0, 0, np.where(x < nb - 1, x, nb - 1)).astype(np.int64)  # NaN: the last bin
        cnt = np.bincount(b_all[member], minlength=nb)
        wsum = [int(w[member & (b_all == i)].sum()) for i in range(nb)] if p is not None else cnt.tolist()
        if nl == 0 and p is not None:
            target = max(1, int(float(f32(p)) * float(sum(wsum))))
        acc, b = above, nb
        for i in range(nb):
            if acc + wsum[i] >= target:
                b = i
                break
            acc += wsum[i]
        if b == nb:
            return lo, "all"
        above = acc
        member = member & (b_all == b)
        if cnt[b] <= nb:
            idx = np.flatnonzero(member)
            order = np.argsort(-keys[idx].astype(np.int64), kind="stable")
            cum = above + np.cumsum([int(v) for v in w[idx][order]])
            return int(keys[idx][order][int(np.argmax(cum >= target))]), f"collect{nl}"
        if nl == 0 and b == nb - 1:
            break
        cur_lo = f32(cur_lo + f32(f32(b) / cur_sc))
        cur_sc = f32(cur_sc * f32(nb))
    return ref.radix_select(keys, w, lo, k, p), "radix"


def test_device_histogram_select_equals_the_sorted_reference_on_every_path():
    rng = np.random.default_rng(11)
    paths = set()
    for trial in range(60):
        n = int(rng.choice([300, 3000]))
        scale = [0.001, 0.05, 2.0, 40.0][trial % 4]  # one bin, a split, spread, a long tail past d = 32
        z = (rng.standard_normal(n) * scale).astype(np.float32)
        if trial % 5 == 0:
            z[: n // 3] = z[n // 3]  # ties no split separates
        zmax = z.max()
        keys, mass = ref.order_key(z), ref.mass_of(z, zmax)
        ones = np.ones(n, dtype=np.uint64)
        nb = [64, 512][trial % 2]
        k = int(rng.integers(1, n - 1))
        tk, how = _device_hist_select(z, zmax, 0, k, None, nb)
        assert tk == ref.radix_select(keys, ones, 0, k, None), (trial, how)
        paths.add(how)
        for lo in (0, tk):
            p = float(rng.choice([0.05, 0.6, 0.95, 0.999]))
            tp, how = _device_hist_select(z, zmax, lo, None, p, nb)
            assert tp == ref.radix_select(keys, mass, lo, None, p), (trial, how, p)
            paths.add(how)
    assert {"collect0", "collect1", "radix"} <= paths, paths


def _tile_candidates(logits, tiles, C, rng, P=None):
    """sampling.cuh lm_candidates in numpy: per tile its C largest logits, sorted (ties by index), and
    the order key of the smallest kept one when the tile had more; with P, each tile's first P and
    the key of its P-th when it had more than P (the prefix argmax tries first)."""
    keys = ref.order_key(logits)
    vals, idx, cuts = [], [], []
    for r0, r1 in tiles:
        k = keys[r0:r1]
        order = np.lexsort((np.arange(r1 - r0), -k.astype(np.int64)))[:C]  # descending; ties by index
        if P is not None:
            cuts.append(int(k[order[P - 1]]) if r1 - r0 > P else 0)
            order = order[:P]
        else:
            cuts.append(int(k[order[-1]]) if r1 - r0 > C else 0)
        vals.append(logits[r0:r1][order])
        idx.append(r0 + order)
    return np.concatenate(vals), np.concatenate(idx), cuts


def _held_kth(keys, cut: int, k: int, exit_: bool = False) -> tuple[int, int]:
    """sampling.cuh held_kth in numpy: the top-k threshold by a search over the keys above the cut
    (0: fewer than k keys there), halving [lo, hi]; with ``exit_`` (CodegenOptions.kth_exit) each
    step also takes the smallest key at or above the split, ends on a count of exactly k and raises
    lo to that key on a larger count. Returns (threshold, block barriers)."""
    keys = np.asarray(keys, np.uint64)
    if cut == 0xFFFFFFFF:
        return 0, 0
    lo, hi = cut + 1, int(keys.max(initial=0))
    if int((keys >= lo).sum()) < k:
        return 0, 1
    steps = 1
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        above = keys[keys >= mid]
        steps += 1
        if exit_ and len(above) == k:
            return int(above.min()), steps
        if len(above) >= k:
            lo = int(above.min()) if exit_ else mid
        else:
            hi = mid - 1
    assert steps <= 34
    return lo, steps


def _held_hist_kth(keys, cut: int, k: int, warp: int = 32) -> tuple[int, str]:
    """sampling.cuh held_hist_kth in numpy (CodegenOptions.held_hist): one count over 256 bins of
    the key range above the cut, from the top, then the reaching bin's keys ranked; a bin of more
    than ``warp`` keys takes the halving. Returns (threshold, "bins" or "halving")."""
    keys = np.asarray(keys, np.uint64)
    if cut == 0xFFFFFFFF:
        return 0, "bins"
    lo = cut + 1
    live = keys[keys >= lo]
    if len(live) < k:
        return 0, "bins"
    kmax = int(keys.max())
    r = kmax - lo
    sh = 0 if r < 256 else 24 - (32 - r.bit_length())
    tb = (np.uint64(kmax) - live) >> np.uint64(sh)
    assert int(tb.max()) <= 255
    cum = np.cumsum(np.bincount(tb.astype(np.int64), minlength=256))
    cb = int(np.argmax(cum >= k))
    above = int(cum[cb - 1]) if cb > 0 else 0
    mem = np.sort(live[tb == cb])[::-1]
    if len(mem) > warp:
        return _held_kth(keys, cut, k)[0], "halving"
    return int(mem[k - above - 1]), "bins"


@pytest.mark.parametrize("seed", range(6))
def test_held_search_finds_the_kth_largest_key_above_the_cut(seed):
    """held_kth's twin against a sort: narrow and wide key ranges, ties, unused slots (0), a cut."""
    rng = np.random.default_rng(seed)
    span = [3, 40, 1 << 12, 1 << 24, 1 << 31, 1 << 32][seed]
    base = 0 if span == 1 << 32 else int(rng.integers(1, (1 << 32) - span))
    keys = (base + rng.integers(0, span, 2112, dtype=np.uint64)) % (1 << 32)
    keys[rng.random(2112) < 0.05] = 0  # unused slots
    srt = np.sort(keys)[::-1]
    for k in (1, 2, 7, 50, 300, 2000):
        for cut in (0, int(srt[min(k + 5, len(srt) - 1)]), int(srt[max(k - 3, 0)])):
            want = int(srt[k - 1]) if int(srt[k - 1]) > cut else 0
            for exit_ in (False, True):
                assert _held_kth(keys, cut, k, exit_)[0] == want, (span, k, cut, exit_)
            assert _held_hist_kth(keys, cut, k)[0] == want, (span, k, cut)


def test_held_count_takes_the_bins_on_tile_candidates():
    """held_hist's point: on llama-3.2-1b's shape (132 tiles of ~971 logits, each tile's 16 largest
    held) at logit scales 0.05 to 3, top-k 50's threshold (the sort's) comes from the bins without
    the halving's fallback."""
    rng = np.random.default_rng(7)
    V, T_ = 128256, 132
    per = V // T_
    for trial in range(9):
        logits = (rng.standard_normal(V) * [1.0, 3.0, 0.05][trial % 3]).astype(np.float32)
        tiles = np.sort(logits[: T_ * per].reshape(T_, per), axis=1)[:, ::-1]
        keys = ref.order_key(np.ascontiguousarray(tiles[:, :16]).ravel())
        cut = int(ref.order_key(np.ascontiguousarray(tiles[:, 15])).max())
        for k in (1, 20, 50):
            want = int(np.sort(keys)[::-1][k - 1])
            assert _held_hist_kth(keys, cut, k) == (want, "bins"), (trial, k)


def _held_top_p(keys, z, thr: int, zmax, p: float, snb: int = 256) -> int:
    """sampling.cuh held_top_p in numpy (CodegenOptions.held_p): the held slots' keys >= thr (the
    top-k set) gathered in slot order, ranked by key (descending, ties by slot), their masses
    (mass_of against the row's zmax) summed from the top until they reach max(1, floor(p * the
    set's mass)); that token's key. 0 where the set holds more than ``snb`` keys."""
    keys, z = np.asarray(keys, np.uint32), np.asarray(z, np.float32)
    live = np.flatnonzero(keys >= np.uint32(thr))
    if len(live) > snb:
        return 0
    cz = z[live]
    ck = ref.order_key(cz).astype(np.int64)
    rank = np.array([int(np.sum((ck > ck[i]) | ((ck == ck[i]) & (np.arange(len(ck)) < i)))) for i in range(len(ck))])
    sz = np.empty_like(cz)
    sz[rank] = cz
    sw = ref.mass_of(sz, zmax)
    target = max(1, int(float(np.float32(p)) * float(int(sw.sum()))))
    r = int(np.searchsorted(np.cumsum(sw), np.uint64(target)))
    return int(ref.order_key(sz[r])) if r < len(sz) else thr


def _held_top_p_direct(keys, z, thr: int, zmax, p: float, snb: int = 256) -> int:
    """held_top_p with CodegenOptions.p_direct in numpy: no ranking; each gathered key's mass sum
    over the set's keys at or above it, and the largest key whose sum reaches max(1, floor(p * the
    set's mass)). 0 where the set holds more than ``snb`` keys."""
    keys, z = np.asarray(keys, np.uint32), np.asarray(z, np.float32)
    live = np.flatnonzero(keys >= np.uint32(thr))
    if len(live) > snb:
        return 0
    ck = keys[live].astype(np.int64)
    w = ref.mass_of(z[live], zmax).astype(np.uint64)
    target = max(1, int(float(np.float32(p)) * float(int(w.sum()))))
    ok = [int(ck[i]) for i in range(len(ck)) if int(w[ck >= ck[i]].sum()) >= target]
    return max(ok) if ok else thr


@pytest.mark.parametrize("seed", range(4))
def test_held_top_p_gives_the_rows_top_k_then_top_p_threshold(seed):
    """held_p's threshold over llama-3.2-1b's held candidates (132 tiles of ~971 logits, each tile's
    16 largest) equals the whole row's top-k-then-top-p threshold (the reference's radix select over
    128,256 tokens) wherever the k-th largest key lies above the cut, ties included (logits rounded
    to a coarse grid); a set wider than the bins gives 0 (the histogram selects take it)."""
    rng = np.random.default_rng(40 + seed)
    V, T_ = 128256, 132
    per = V // T_
    checked = 0
    for trial in range(6):
        scale = [1.0, 3.0, 0.05][trial % 3]
        logits = (rng.standard_normal(V) * scale).astype(np.float32)
        if seed % 2:  # ties: a grid of 1/8 of the scale
            logits = (np.round(logits / (scale / 8)) * (scale / 8)).astype(np.float32)
        temp = [1.0, 0.7, 1.3][trial % 3]
        zmax = np.float32(logits.max() / np.float32(temp))
        tiles = np.sort(logits[: T_ * per].reshape(T_, per), axis=1)[:, ::-1]
        logits = np.concatenate([tiles.ravel(), logits[T_ * per:]])  # (the row's order does not matter)
        z_row = (logits / np.float32(temp)).astype(np.float32)
        hz = (np.ascontiguousarray(tiles[:, :16]).ravel() / np.float32(temp)).astype(np.float32)
        keys = ref.order_key(hz)
        cut = int(ref.order_key((tiles[:, 15] / np.float32(temp)).astype(np.float32)).max())
        for k, p in ((50, 0.9), (50, 0.5), (20, 0.95), (64, 0.3), (1, 0.5)):
            thr = int(np.sort(keys)[::-1][k - 1])
            if thr <= cut:
                continue
            want = ref.threshold(logits, temp, top_k=k, top_p=p)
            got = _held_top_p(keys, hz, thr, zmax, p)
            assert _held_top_p_direct(keys, hz, thr, zmax, p) == got, (trial, k, p)
            if got == 0:
                assert int(np.sum(keys >= thr)) > 256
                continue
            assert got == want, (trial, k, p)
            checked += 1
            assert np.all(ref.order_key(z_row)[ref.order_key(z_row) >= np.uint32(got)] >= np.uint32(thr))
    assert checked >= 20, checked
    wide = np.full(300, ref.order_key(np.float32(1.0)), np.uint32)  # 300 tied keys: over the bins
    assert _held_top_p(wide, np.ones(300, np.float32), int(wide[0]), np.float32(1.0), 0.9) == 0
    assert _held_top_p_direct(wide, np.ones(300, np.float32), int(wide[0]), np.float32(1.0), 0.9) == 0


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("prefix", [False, True])
def test_candidate_path_gives_the_row_thresholds_or_falls_back(seed, prefix):
    from mkc.taskgraph.lower import LM_CAND, LM_PREF

    rng = np.random.default_rng(seed)
    V, T_ = 5000, 0.7
    tiles = [(a, min(V, a + 97)) for a in range(0, V, 97)]
    logits = (rng.standard_normal(V) * [0.3, 2.0, 0.002][seed % 3]).astype(np.float32)
    if seed % 4 == 3:  # one tile holds the row's largest logits: a top-k beyond its candidates
        logits[tiles[5][0]:tiles[5][1]] += 40
    if seed % 4 == 2:
        logits[: V // 2] = logits[0]  # ties across tiles
    z = (logits / np.float32(T_)).astype(np.float32)
    zmax = np.float32(logits.max() / np.float32(T_))
    vals, idx, cuts = _tile_candidates(logits, tiles, LM_CAND, rng, LM_PREF if prefix else None)
    cz = (vals / np.float32(T_)).astype(np.float32)
    ck = ref.order_key(cz)
    bits = lambda k: np.uint32(k & 0x7FFFFFFF if k & 0x80000000 else ~np.uint32(k))  # noqa: E731
    cut = max((int(ref.order_key(np.float32(np.array(bits(c), np.uint32).view(np.float32)) / np.float32(T_)))
               for c in cuts if c), default=0)
    trusted = []
    for k in (1, 7, 16, 50, LM_CAND):
        tk = ref.radix_select(ck, np.ones(len(ck), np.uint64), 0, k, None)
        want = ref.radix_select(ref.order_key(z), np.ones(V, np.uint64), 0, k, None)
        # the search (CodegenOptions.cand_bisect): the same threshold where trusted, else none
        for exit_ in (False, True):
            assert _held_kth(ck, cut, k, exit_)[0] == (tk if tk > cut else 0), (k, tk, cut, exit_)
        if tk > cut:  # trusted: the same threshold as the whole row, and top-p over the top-k set too
            trusted.append(k)
            assert tk == want, (k, tk, want)
            for p in (0.3, 0.9):
                got = ref.radix_select(ck, ref.mass_of(cz, zmax), tk, None, p)
                assert got == ref.radix_select(ref.order_key(z), ref.mass_of(z, zmax), tk, None, p)
        else:
            assert seed % 4 in (2, 3) or k == LM_CAND, (seed, k)  # only crowded tiles or ties fall back
    if seed % 4 in (0, 1):  # spread rows: the prefix of 16 per tile holds a top-50 too
        assert 50 in trusted, (seed, prefix, trusted)
    if seed % 4 == 3:
        assert ref.radix_select(ck, np.ones(len(ck), np.uint64), 0, LM_CAND, None) <= cut  # the fallback is taken


def test_sampling_check_and_kernel_arguments():
    assert Sampling().check() == [] and Sampling().greedy
    bad = Sampling(temperature=-1, top_k=-2, top_p=0.0, min_p=1.5, seed=-1).check()
    assert len(bad) == 5 and any("top_p" in b and "(0, 1]" in b for b in bad)
    assert Sampling(top_p=1.0).check() == [] and Sampling(top_p=1.01).check()
    f32 = lambda x: int(np.array(x, dtype=np.float32).view(np.uint32))  # noqa: E731
    flags, words = Sampling(temperature=0.7, top_k=50, top_p=0.9, seed=(5 << 32) | 9).kernel_words(1000)
    assert flags == T.TOKF_FILTER | T.TOKF_CAND and words == [f32(0.7), 50, f32(0.9), 0, 9, 5]
    assert Sampling(temperature=0.7, top_k=65, top_p=0.9).kernel_words(1000)[0] == T.TOKF_FILTER  # beyond LM_CAND
    # no top-k: the rejection sampler (then the whole row), also where top-k keeps every token
    assert Sampling(temperature=0.7, top_p=0.9).kernel_words(1000)[0] == T.TOKF_FILTER | T.TOKF_PDRAW
    assert Sampling(temperature=0.7, top_k=1000, min_p=0.1).kernel_words(1000)[0] == T.TOKF_FILTER | T.TOKF_PDRAW
    assert len(words) == T.TOKEN_WORDS.index("WS_CTL_LO") - 1
    assert Sampling(temperature=0.7).kernel_words(1000)[0] == T.TOKF_GUMBEL
    assert Sampling(temperature=0.7, top_k=1000).kernel_words(1000)[0] == T.TOKF_GUMBEL  # top-k of all: no filter
    assert Sampling(top_k=5).kernel_words(1000)[0] == 0  # greedy


# ---- decode's host bookkeeping -----------------------------------------------------------------------
def _plan(rows, mx, eos=None, B=4, V=100, L=32, start=0):
    return plan_decode(rows, mx, eos, batch=B, vocab=V, max_seq_len=L, start_pos=start)


def test_plan_decode_pads_and_lays_out_the_control_block():
    p = _plan([[5, 6, 7], [8]], [4, 2], eos=[3, 9])
    assert p.plens == (3, 1, 0, 0) and p.max_new == (4, 2, 0, 0) and p.eos == (3, 9) and p.n_rows == 2
    assert p.nsteps == 6  # row 0: 3 prompt tokens + 4 new - 1
    ids = p.ids([[5, 6, 7], [8]])
    assert ids.shape == (3, 4) and ids[:, 0].tolist() == [5, 6, 7] and ids[:, 1].tolist() == [8, 0, 0]
    at = T.ctl_layout(4, 32)
    head = p.ctl_head()
    assert len(head) == at["CTL_DONE"] + 6  # through each step's all-stopped flag, 1 until an argmax task clears it
    assert head[at["CTL_STOP"]: at["CTL_DONE"]].tolist() == [0] * 4 and head[at["CTL_DONE"]:].tolist() == [1] * 6
    assert head[at["CTL_PLEN"]: at["CTL_PLEN"] + 4].tolist() == [3, 1, 0, 0]
    assert head[at["CTL_MAXNEW"]: at["CTL_MAXNEW"] + 4].tolist() == [4, 2, 0, 0]
    assert head[at["CTL_NEOS"]] == 2 and head[at["CTL_EOS"]: at["CTL_EOS"] + 2].tolist() == [3, 9]
    assert _plan([[1]], 3, eos=7).eos == (7,)
    import torch

    assert _plan(torch.tensor([[5, 6, 7], [8, 9, 1]]), 2).plens == (3, 3, 0, 0)  # a 2-D tensor: its rows
    assert _plan([np.array([5, 6]), torch.tensor([8])], np.int64(2)).plens == (2, 1, 0, 0)


@pytest.mark.parametrize("args, match", [
    (([[1]] * 5, 2), "5 rows given, the kernel was compiled for batch 4"),
    (([[1], []], 2), "row 1 has no token ids"),
    (([[1, 100]], 2), r"token id 100 of row 0 \(position 1\) is outside the vocabulary \[0, 100\)"),
    (([[1, -1]], 2), "token id -1 of row 0"),
    (([[1]], 2, [1, 2, 3, 4, 5]), "at most 4"),
    (([[1]], 2, 100), "eos_token_id 100 is outside"),
    (([[1], [2]], [1]), "1 entries for 2 rows"),
    (([[1]], -1), ">= 0"),
    (([[1] * 30], 5), "past max_seq_len 32"),
    (([[1.5]], 2), "must be an int"),
])
def test_plan_decode_refuses_with_names(args, match):
    with pytest.raises(MkcError, match=match):
        _plan(*args)


def test_start_pos_counts_against_max_seq_len():
    _plan([[1, 2]], 4, start=27)  # positions 27..31
    with pytest.raises(MkcError, match="up to 32, past max_seq_len 32"):
        _plan([[1, 2]], 5, start=27)


def test_steps_run_and_row_outputs():
    assert steps_run(np.zeros(6, dtype=np.int32), 6) == 6
    assert steps_run(np.array([0, 0, 1, 1, 0, 0]), 6) == 4  # stopped after step 2: step 3 is the wasted one
    assert steps_run(np.array([0, 0, 0, 0, 0, 1]), 6) == 6
    p = _plan([[5, 6, 7], [8]], [4, 3], eos=9)
    log = np.array([[50, 9], [60, 11], [70, 9], [71, 12], [9, 13], [72, 14]])
    # row 0: new tokens from step 2 (70, 71, 9: stops at the EOS); row 1 from step 0 (9: EOS at once)
    assert row_outputs(log, p) == [[70, 71, 9], [9]]
    assert row_outputs(log[:3], p) == [[70], [9]]  # a stream so far
    p2 = _plan([[5], [8]], [2, 3])
    assert row_outputs(log, p2) == [[50, 60], [9, 11, 9]]  # no EOS: the budgets


# ---- the rendered kernel --------------------------------------------------------------------------
def test_a_task_graph_with_another_candidate_layout_is_refused():
    """A task graph saved by a version whose candidate blocks had another size would have the kernel
    write past the buffer the runtime allocates from it: codegen names the buffer and says to compile again."""
    import dataclasses

    from mkc.codegen.render import generate
    from mkc.errors import IRCheckError
    from mkc.taskgraph import names

    tg = taskgraph("tiny-llama", 2, 64)
    bufs = tuple(dataclasses.replace(b, shape=(b.shape[0], b.shape[1] - 2 * b.shape[1] // 131)) if b.name == names.LM_CAND
                 else b for b in tg.buffers)
    old = dataclasses.replace(tg, buffers=bufs)
    with pytest.raises(IRCheckError, match="lm_cand.*compile the model again"):
        generate(old, rr_schedule(old, "h200", "atomic"), "h200")


def test_walk_is_refused_where_a_block_has_fewer_threads_than_lm_head_tiles():
    """CodegenOptions.pdraw_walk holds a tile's candidates per thread: the MI300X's 304 LM-head tiles
    outnumber a block's threads, and the option is refused by name rather than left to a
    static_assert in the compiler."""
    from mkc.codegen.render import CodegenOptions, generate
    from mkc.errors import IRCheckError
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("mi300x"))
    with pytest.raises(IRCheckError, match="pdraw_walk needs a thread per LM-head tile"):
        generate(tg, rr_schedule(tg, "mi300x", "atomic"), "mi300x", CodegenOptions(pdraw_walk=True))
    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"))
    src, _, _ = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200", CodegenOptions(pdraw_walk=True))
    assert "PDRAW_WALK = 1" in src


@pytest.mark.parametrize("batch", [1, 8])
def test_held_candidates_and_their_search_are_rendered_where_they_were_measured(batch):
    """CodegenOptions.cand_held (None: batch 1 only; at batch 8 the held slots raised the sampling
    kernel's spills), cand_bisect, cand_noise (only where the held draw reads it) and kth_exit reach
    the kernel as constants."""
    from mkc.codegen.render import CodegenOptions, generate
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(shape_graph("llama-3.2-1b", batch, 128), get_target("h200"))
    sched = rr_schedule(tg, "h200", "atomic")
    src, _, _ = generate(tg, sched, "h200", CodegenOptions(sampler=True))
    assert f"CAND_HELD_ON = {int(batch == 1)}" in src and "CAND_BISECT = 1" in src
    assert f"CAND_NOISE = {int(batch == 1)}" in src and "KTH_EXIT = 0" in src  # (the noise: where the held draw runs)
    assert f"HELD_P = {int(batch == 1)}" in src  # (top-p over the held set: where the held path runs)
    assert "HELD_HIST ? held_hist_kth(kz, cut, (unsigned)s.top_k) : held_kth(kz, cut, (unsigned)s.top_k)" in src
    src, _, _ = generate(tg, sched, "h200", CodegenOptions(sampler=True, cand_noise=False, kth_exit=True))
    assert "CAND_NOISE = 0" in src and "KTH_EXIT = 1" in src
    src, _, _ = generate(tg, sched, "h200", CodegenOptions(sampler=True, cand_held=True))
    assert "CAND_HELD_ON = 1" in src and "CAND_NOISE = 1" in src


def test_held_search_with_the_exit_takes_fewer_steps_on_tile_candidates():
    """kth_exit's point: on llama-3.2-1b's shape (132 tiles of ~971 logits, each tile's 16 largest
    held), top-k 50's search ends in well under half the halving's block barriers, with the same
    threshold (the sort's)."""
    rng = np.random.default_rng(5)
    V, T_ = 128256, 132
    per = V // T_  # (the last tile a few logits longer in the kernel)
    plain, early = [], []
    for trial in range(6):
        logits = (rng.standard_normal(V) * [1.0, 3.0, 0.05][trial % 3]).astype(np.float32)
        tiles = np.sort(logits[: T_ * per].reshape(T_, per), axis=1)[:, ::-1]
        keys = ref.order_key(np.ascontiguousarray(tiles[:, :16]).ravel())
        cut = int(ref.order_key(np.ascontiguousarray(tiles[:, 15])).max())
        want = int(np.sort(keys)[::-1][49])
        for exit_, out in ((False, plain), (True, early)):
            thr, steps = _held_kth(keys, cut, 50, exit_)
            assert thr == want
            out.append(steps)
    assert np.mean(early) < 0.6 * np.mean(plain), (early, plain)


def test_tile_hist_cut_keeps_each_tiles_largest_logits_without_splitting_ties():
    """CodegenOptions.tile_hist's cut (its numpy twin, sampling_ref.tile_hist_cut): on ~972-logit
    tiles at logit scales from 0.01 to 10 it keeps between LM_PREF and LM_CAND logits, always the
    tile's largest, and the first logit left out is strictly below the last kept (equal logits, +0
    and -0 included, share a bin); a scale below the bins' range falls back to the radix select."""
    from mkc.taskgraph.lower import LM_CAND, LM_PREF

    rng = np.random.default_rng(11)
    for scale in (0.01, 0.1, 1.0, 3.0, 10.0):
        kept_counts = []
        for _ in range(40):
            z = (rng.standard_normal(972) * scale).astype(np.float32)
            z[rng.integers(0, 972, 30)] = z.max()  # ties at the top
            z[:8] = np.float32(-0.0) if scale > 5 else z[:8]
            m = ref.tile_hist_cut(z, LM_CAND, LM_PREF)
            assert m is not None, scale
            srt = np.sort(z)[::-1]
            assert LM_PREF <= m <= LM_CAND and srt[m] < srt[m - 1], (scale, m)
            kept_counts.append(m)
        assert np.mean(kept_counts) > 48, (scale, np.mean(kept_counts))
    # ties that fill more than LM_CAND - LM_PREF slots at the cut, and a row of zeros (+0 and -0)
    z = np.concatenate([np.linspace(1.0, 0.9, 10), np.full(100, 0.5), rng.standard_normal(800) * 0.1]).astype(np.float32)
    assert ref.tile_hist_cut(z, LM_CAND, LM_PREF) is None
    z = np.zeros(972, np.float32)
    z[::2] = -0.0
    assert ref.tile_hist_cut(z, LM_CAND, LM_PREF) is None
    z = (rng.standard_normal(972) * 1e-4).astype(np.float32)  # below 2^-8 from the top: one bin
    assert ref.tile_hist_cut(z, LM_CAND, LM_PREF) is None
    z[5] = np.float32(np.nan)
    assert ref.tile_hist_cut(z, LM_CAND, LM_PREF) is None


def test_tile_hist_walk_scan_held_hist_and_walk_fine_reach_the_kernel():
    """CodegenOptions.tile_hist, walk_scan, held_hist and walk_fine (on by default) as the kernel's
    constants."""
    from mkc.codegen.render import CodegenOptions, generate
    from mkc.target import get_target
    from mkc.taskgraph import lower

    tg = lower(shape_graph("llama-3.2-1b", 1, 128), get_target("h200"))
    sched = rr_schedule(tg, "h200", "atomic")
    names = ("TILE_HIST", "WALK_SCAN", "HELD_HIST", "WALK_FINE")
    src, _, _ = generate(tg, sched, "h200", CodegenOptions(sampler=True))
    assert all(f"{n} = 1" in src for n in names)
    assert "HELD_P = 1" in src and "WALK_ONCE = 1" in src and "RANK_QUAD = 0" in src
    assert "RANK_QUAD = 1" in generate(tg, sched, "h200", CodegenOptions(sampler=True, rank_quad=True))[0]
    # gather_once (on), held_early and p_direct (off): held_early at batch 1 only, where the held path runs
    assert "HELD_EARLY = 0" in src and "P_DIRECT = 0" in src and "GATHER_ONCE = 1" in src
    src = generate(tg, sched, "h200", CodegenOptions(sampler=True, held_p=False, walk_once=False))[0]
    assert "HELD_P = 0" in src and "WALK_ONCE = 0" in src
    on = CodegenOptions(sampler=True, held_early=True, p_direct=True, gather_once=False)
    src_on = generate(tg, sched, "h200", on)[0]
    assert "HELD_EARLY = 1" in src_on and "P_DIRECT = 1" in src_on and "GATHER_ONCE = 0" in src_on
    tg8 = lower(shape_graph("llama-3.2-1b", 8, 128), get_target("h200"))
    assert "HELD_EARLY = 0" in generate(tg8, rr_schedule(tg8, "h200", "atomic"), "h200",
                                        CodegenOptions(sampler=True, held_early=True))[0]
    off = CodegenOptions(sampler=True, tile_hist=False, walk_scan=False, held_hist=False, walk_fine=False)
    src, _, _ = generate(tg, sched, "h200", off)
    assert all(f"{n} = 0" in src for n in names)



def test_rendered_kernel_has_the_token_end():
    from mkc.codegen.render import generate

    tg = taskgraph("tiny-llama", 2, 64)
    src, cfg, _ = generate(tg, rr_schedule(tg, "h200", "atomic"), "h200")
    for needle in ("if (stop_launch(c)) {", "CTL_DONE + k - 2", "philox_x0", "mk_fence_system();",
                   "st.relaxed.sys.global.b32", "if (step0 < 0) { step0 = (int)mk_ld_relaxed(ws + WS_CLK_STEP);",
                   "sample_filtered(c, smp, b, s_max[b], MKC_SAMPLE_CAND && (flags & TOKF_CAND) != 0,",
                   "SAMPLE_PDRAW && (flags & TOKF_PDRAW) != 0);",
                   "const int tok = PDRAW_WALK ? sample_pwalk(c, s, b, rawmax) : sample_pdraw(c, s, b, rawmax);",
                   "if (flags & TOKF_GUMBEL)",
                   "out[j * OUT_LD + b] / s.temperature + gumbel(c, s, b, rb + j)", "WS_TOK_FLAGS = 11"):
        assert needle in src, needle
    consts = dict(cfg.consts)
    assert {k: consts[k] for k in T.ctl_layout(2, 64)} == T.ctl_layout(2, 64) and consts["MAX_EOS"] == T.MAX_EOS


# ---- decode through the AMD driver's stand-in ---------------------------------------------------
def _fake_megakernel(sync="atomic"):
    from test_hip_runtime import FakeHip, _weights

    from mkc.runtime import Megakernel
    from mkc.targets.amd.driver import HipDriver

    tg = taskgraph("tiny-llama", 2, 64, "mi250x")
    fake = FakeHip()
    mk = Megakernel(tg, rr_schedule(tg, "mi250x", sync, workers=12), _weights(tg), driver=HipDriver(hip=fake),
                    binary=b"x")
    return mk, fake


def _play_kernel(mk, fake, next_token):
    """A Python kernel: token k of row b is next_token(k, b, fed); argmax's stop rule and done flags
    as tokens.cuh writes them; the early exit of the step loop."""
    at, B = mk.ctl_at, mk.B
    addr = {n: mk.buffers[n].ptr for n in ("ids", "tokens", "next_ids")}

    def kernel(fk, a):
        tok = dict(zip(T.WORKSPACE, fk.read(a["ws"], np.uint32, T.WS_COUNTERS).tolist()))
        ctl_at = tok["WS_CTL_LO"] | tok["WS_CTL_HI"] << 32
        ctl = fk.read(ctl_at, np.int32, at["CTL_WORDS"]).copy() if tok["WS_TOK_FLAGS"] & T.TOKF_CTL else None
        nxt = [0] * B
        for k in range(a["nsteps"]):
            if ctl is not None and k >= 2 and ctl[at["CTL_DONE"] + k - 2]:
                break
            toks = []
            for b in range(B):
                plen = ctl[at["CTL_PLEN"] + b] if ctl is not None else a["nforced"]
                fed = int(fk.read(addr["ids"] + 4 * (k * B + b), np.int32, 1)[0]) if k < plen else nxt[b]
                toks.append(next_token(k, b, fed))
            fk.htod(addr["tokens"] + 4 * B * k, np.array(toks, dtype=np.int32))
            nxt = toks
            if ctl is not None:
                eos = set(ctl[at["CTL_EOS"]: at["CTL_EOS"] + ctl[at["CTL_NEOS"]]].tolist())
                for b in range(B):
                    plen, mx = ctl[at["CTL_PLEN"] + b], ctl[at["CTL_MAXNEW"] + b]
                    st = int(mx <= 0) if k == 0 else ctl[at["CTL_STOP"] + b]
                    j = k - (plen - 1)
                    if not st and j >= 0 and (j + 1 >= mx or toks[b] in eos):
                        st = 1
                    ctl[at["CTL_STOP"] + b] = st
                    if not st:  # one argmax task per row: a row still going clears the step's flag
                        ctl[at["CTL_DONE"] + k] = 0
                fk.htod(ctl_at, ctl)
    fake.on_launch = kernel


def test_decode_end_to_end_on_the_stand_in():
    mk, fake = _fake_megakernel()
    _play_kernel(mk, fake, lambda k, b, fed: fed + 1 if fed + 1 != 20 else 99)
    seen = []
    out = mk.decode([[10, 11, 12], [15]], [5, 8], eos_token_id=[99, 40], on_step=seen.append)
    # row 0: fed 10 11 12 then its own tokens: 13 14 15 16 17 (budget 5); row 1: 16..19, then 99 (EOS)
    assert out == [[13, 14, 15, 16, 17], [16, 17, 18, 19, 99]]
    a = fake.launches[-1]
    assert a["nsteps"] == 8 and a["nforced"] == 0
    tok = dict(zip(T.WORKSPACE, fake.read(mk.ws.ptr, np.uint32, T.WS_COUNTERS).tolist()))
    assert tok["WS_TOK_FLAGS"] == T.TOKF_CTL and tok["WS_CTL_LO"] | tok["WS_CTL_HI"] << 32 == mk.ctl.ptr
    assert seen == [out]  # no host-mapped stream on this driver: once, at the end
    # all rows stopped after step 6 (row 0's 5th new token): step 7 is the wasted one; 8 steps ran
    assert mk.step == 8 and mk._written == 8


def test_decode_early_exit_moves_the_step_counter_by_the_steps_that_ran():
    mk, fake = _fake_megakernel()
    _play_kernel(mk, fake, lambda k, b, fed: 99 if k == 1 else fed + 1)
    out = mk.decode([[10], [20]], 30, eos_token_id=99)
    assert out == [[11, 99], [21, 99]]
    assert fake.launches[-1]["nsteps"] == 30 and mk.step == 3 and mk._written == 3
    # a continuation from position 3: no reset, the step counter goes on
    out = mk.decode([[7], [7]], 1, start_pos=3)
    assert out == [[8], [8]] and mk.step == 4 and fake.launches[-1]["step0"] == 3 and fake.launches[-1]["pos0"] == 3


def test_decode_padding_rows_and_no_work():
    mk, fake = _fake_megakernel()
    _play_kernel(mk, fake, lambda k, b, fed: fed + 1)
    assert mk.decode([[10, 11]], 3) == [[12, 13, 14]]
    n = len(fake.launches)
    assert mk.decode([[1], [2]], 0) == [[], []] and len(fake.launches) == n  # nothing to decode: no launch


def test_step_refuses_ids_outside_the_vocabulary_before_launching():
    mk, fake = _fake_megakernel()
    n = len(fake.launches)
    with pytest.raises(MkcError, match=r"token id 32000 of row 1 \(position 0\) is outside the vocabulary"):
        mk(np.array([3, 32000]), 0)
    with pytest.raises(MkcError, match="token id -2 of row 0"):
        mk(np.array([-2, 1]), 0)
    assert len(fake.launches) == n
    with pytest.raises(MkcError, match="top_p"):
        mk(np.array([1, 1]), 0, sampling=Sampling(temperature=1.0, top_p=0.0))


def test_token_settings_are_written_only_when_they_change():
    mk, fake = _fake_megakernel()
    _play_kernel(mk, fake, lambda k, b, fed: fed + 1)
    at = mk.ws.ptr + 4 * T.WORKSPACE.index("WS_TOK_FLAGS")
    writes = []
    htod = fake.htod
    fake.htod = lambda dst, data: (writes.append(dst), htod(dst, data))[1]
    mk(np.array([1, 2]), 0)
    mk(np.array([1, 2]), 1)
    assert at not in writes  # greedy steps: the zeros reset left
    mk(np.array([1, 2]), 2, sampling=Sampling(temperature=0.5, seed=3))
    mk(np.array([1, 2]), 3, sampling=Sampling(temperature=0.5, seed=3))
    assert writes.count(at) == 1
    words = dict(zip(T.WORKSPACE, fake.read(mk.ws.ptr, np.uint32, T.WS_COUNTERS).tolist()))
    assert words["WS_TOK_FLAGS"] == T.TOKF_GUMBEL and words["WS_SEED_LO"] == 3 and words["WS_TOPK"] == 0
    mk(np.array([1, 2]), 4)  # back to greedy: zeros again
    assert writes.count(at) == 2 and not fake.read(at, np.uint32, len(T.TOKEN_WORDS)).any()
