"""The device plan: how the kernel runs the task graph on one target, decided once, in lowering.

Lowering computes it from the task graph's shapes and the target backend's capabilities and
launch limits; the cost model (which GEMV path to price), the verifier (the shared-memory layout
it proves) and codegen (the constants it prints) read it, and nothing recomputes it. Codegen
knobs that change the plan (``PlanKnobs``, e.g. a benchmark variant forcing the FMA path) get a
plan from the same function.

Shared memory has two layouts over the same bytes (a block runs one task at a time):

- GEMV kinds: the staged input (fp32 ``[B][KC]``, or bf16 ``[B][KCB + 32]`` on the tensor-core
  path), the output block, split-K partials, 1/rms, warp partial sums, the argmax pair, the
  attention-split weights, and on the tensor-core path the cp.async weight ring;
- attention: q, the new key, probabilities, max/sum/rescale, and the K/V rows loaded before the
  wait (later the partial outputs, in the same bytes);

then a flag word after both. ``regions`` lists ``(name, offset, bytes)`` of each; ``smem_bytes``
is what the layout needs. The cost model's streaming model (``stages`` x ``stage_bytes`` of a
task's weights in flight, ``taskgraph/smem.py``) is part of the plan too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mkc.errors import ScheduleError

GEMV_MMA, GEMV_FMA = "mma", "fma"
# A pipeline page: PIPE_ROWS weight rows (one per consumer warp) of PIPE_COLS bf16 columns, 16 KiB
PIPE_ROWS, PIPE_COLS = 8, 1024
PIPE_PAGE = PIPE_ROWS * PIPE_COLS * 2
# row groups whose warp partials the K-split consumers sum at once (pipe.cuh pipe_rows_ks)
PIPE_KS_FLUSH = 2
PIPE_MAX_SLOTS = 12
# pages at most unless asked for others (PlanKnobs.pipe_pages), where they fit (b1: llama-3.2-1b 11,
# qwen3-8b 10). While
# the consumers' dot products ran at about the HBM's share of an SM, a deeper ring only queued more
# at HBM (H200, llama-3.2-1b b1, same call: 4 pages 0.888 ms/token, 6 0.868, 8 0.855, 11 0.868);
# with the staged input in planes (CodegenOptions.xs_planes) they catch up on what landed during a
# wait, and more pages pay (eighteenth session: 8 0.8163, 10 0.8040, 11 (12 asked) 0.7950)
PIPE_DEFAULT_PAGES = 12
PIPE_REGIONS = ("OFF_PIPE", "OFF_MBAR")
# The tensor-core path's page: one 16-row MMA tile of PIPE_MMA_COLS columns (a multiple of
# PIPE_MMA_UNIT), each row PIPE_MMA_PAD elements longer (64 bytes: the two rows of each 8-lane phase
# of a 16-byte shared load hit disjoint banks), 33 KiB; the consumer warps split its columns
# (gemv_mma.cuh pipe_mma_rows). H200, same call (BENCHMARKS.md, tenth session): rows of 1 KiB
# (512 columns, 1 KiB per bulk copy) streamed ~21 GB/s per SM, rows of 2 KiB ~32 (llama-3.2-1b b8
# 1.149 -> 1.006 ms/token).
PIPE_MMA_ROWS, PIPE_MMA_COLS, PIPE_MMA_UNIT, PIPE_MMA_PAD = 16, 1024, 512, 32
PIPE_MMA_PAGES = 5
# the tensor-core path takes the pipeline by default up to this batch (measured at 8 and 32; past it
# the staged input leaves too little room for pages)
PIPE_MMA_MAX_BATCH = 32
# PlanKnobs.out_pad's default on the tensor-core path: floats past B between the output block's rows
# (DevicePlan.out_ld), where the larger block leaves the K-chunk, the pages and the ring as they are
# (else none: at batch 8 on the H100 a halved K-chunk cost 6 % and changed the order of the sums).
# H100, forty-fifth session: batch 32 -0.2 / -0.8 / -2.1 %, batch 16 -0.8 / 0.0 %, qwen3-8b batch 8 -1.4 %
OUT_PAD = 2


@dataclass(frozen=True)
class PlanKnobs:
    """Choices a caller may force (``CodegenOptions``); the defaults are what lowering plans."""

    mma: bool | None = None  # tensor-core GEMV; None: from batch 2 where the target has a bf16 MMA
    ring_stages: int | None = None  # cp.async weight-ring stages on the MMA path; None: 3 up to batch 16
    rows_per_warp: int = 2  # G: weight rows a warp streams at once (FMA path)
    loads_in_flight: int = 0  # U: 16-byte loads per row per lane per batch; 0: by batch size
    attn_chunk: int = 256  # positions per attention tile
    # the cross-task weight pipeline; None: where planned (bulk copies: batch 1 on the FMA path,
    # 2..PIPE_MMA_MAX_BATCH on the tensor-core path), True: required (any batch on the tensor-core path)
    pipe: bool | None = None
    # the pipeline's pages at most (up to PIPE_MAX_SLOTS); 0: PIPE_DEFAULT_PAGES / PIPE_MMA_PAGES
    pipe_pages: int = 0
    # a page's columns, a multiple of PIPE_COLS (FMA path) or PIPE_MMA_UNIT (tensor cores); 0: the default
    pipe_cols: int = 0
    # floats between two rows of the output block past B (DevicePlan.out_ld), tensor-core path only;
    # None: OUT_PAD there (0 on the FMA path, whose batch-1 rows are single floats)
    out_pad: int | None = None


def sample_smem(batch: int, hists: int, nb: int) -> int:
    """The argmax task's shared-memory scratch from SAMPLE_BASE (the OFF_SAMPLE region; sampling.cuh SM_*): one region for
    either ``hists`` copies of 256 u64 radix bins or the histogram select's ``nb`` bins and collected
    tokens (32 B each), then per-warp (score, index) pairs, result words, the select's levels, a token and a maximum per row."""
    return max(hists * 256 * 8, 32 * nb) + 512 + 96 + 8 * batch


def sample_sizes(batch: int, warps: int, room: int) -> tuple[int, int]:
    """(radix histogram copies, histogram-select bins) for the ``room`` below the flag word: one radix
    copy per warp (fewer serialised adds) and 512 bins where they fit, at least 1 and 64."""
    free = room - sample_smem(batch, 0, 0)
    hists = max(1, min(warps, free // 2048))
    nb = 512
    while nb > 64 and 32 * nb > free:
        nb //= 2
    return hists, nb


def sample_region(regions, batch: int, warps: int) -> tuple[str, int, int]:
    """The argmax task's scratch as a region of the layout: in the task layouts' bytes (a block runs
    one task at a time), after the weight pipeline's pages (which the producer fills while argmax
    runs), below the flag word."""
    base = max((o + n for name, o, n in regions if name in PIPE_REGIONS), default=0)
    base = -(-base // 16) * 16
    room = dict((n, o) for n, o, _ in regions).get("OFF_FLAG", 0) - base
    need = sample_smem(batch, *sample_sizes(batch, warps, room))
    if room < need:
        raise ScheduleError(f"the sampler's {need} B of shared-memory scratch (between byte {base} and the flag "
                            f"word) do not fit this layout (flag at {base + room})")
    return "OFF_SAMPLE", base, need


@dataclass(frozen=True)
class DevicePlan:
    threads: int  # per block
    warp: int  # lanes per warp / wavefront
    gemv: str  # mma | fma: how the GEMV kinds compute
    ring: int  # MMA path: cp.async weight-ring stages (0: register double buffer, and on the FMA path)
    kc: int  # FMA path: K-chunk of staged fp32 input, elements
    kcb: int  # MMA path: K-chunk of staged bf16 input (0 on the FMA path)
    rows_per_warp: int
    loads_in_flight: int
    batch_rows: int  # BB: batch rows per pass of the FMA inner loop
    out_cap: int  # floats of the output block (its rows out_cap // out_ld, out_ld floats apart)
    attn_split: int  # attention tasks per (batch row, kv head)
    attn_chunk: int
    stages: int  # the cost model's weight pipeline: stages of stage_bytes each a GEMV task keeps in flight
    stage_bytes: int
    regions: tuple[tuple[str, int, int], ...]  # (name, offset, bytes) of the shared-memory layout
    smem_bytes: int  # what the layout needs per block
    # The cross-task weight pipeline (FMA path): a producer warp beside the ``threads`` consumers
    # copies every GEMV task's weight rows, in queue order and across tasks and steps, into
    # ``pipe_slots`` pages of ``PIPE_ROWS`` rows x ``PIPE_COLS`` columns (bulk asynchronous copies
    # completing on one mbarrier per page); it waits only for free pages, never for events.
    # 0: no pipeline (weights stream through registers).
    pipe_slots: int = 0
    producer_warps: int = 0  # warps beside the consumers (the pipeline's producer)
    # a page's geometry: rows, columns, and the elements between two rows' starts (tensor-core
    # path: PIPE_MMA_*)
    pipe_rows: int = PIPE_ROWS
    pipe_cols: int = PIPE_COLS
    pipe_ld: int = PIPE_COLS
    # floats between the starts of two rows of the output block (row j of batch column b at
    # j * out_ld + b); 0: the batch (no padding, as plans saved before it)
    out_ld: int = 0

    @property
    def pipe_page(self) -> int:
        """Bytes of one pipeline page."""
        return self.pipe_rows * self.pipe_ld * 2

    @property
    def launch_threads(self) -> int:
        """Threads a block is launched with: the consumers and the producer warp."""
        return self.threads + self.producer_warps * self.warp

    @property
    def mma(self) -> bool:
        return self.gemv == GEMV_MMA

    @property
    def prefetch_bytes(self) -> int:
        """Shared memory the task before a GEMV task holds to stream that task's weights early."""
        return self.stages * self.stage_bytes

    def summary(self, threads: int | None = None, consumer_regs: int = 0) -> dict:
        """What the kernel does with this plan, for build reports: the GEMV path, how weights reach
        it, the staged input's K-chunk, the block and its shared memory. ``threads`` and
        ``consumer_regs``: what the kernel launches where codegen made the producer a warpgroup whose
        registers the consumers take (CodegenOptions.consumer_regs); by default the plan's own."""
        if self.pipe_slots:
            producer = (f"a producer warpgroup whose registers the consumer warps take ({consumer_regs} per thread)"
                        if consumer_regs else "a producer warp")
            weights = (f"a weight pipeline of {self.pipe_slots} pages of {self.pipe_rows} rows x {self.pipe_cols} "
                       f"columns ({self.pipe_page // 1024} KiB) filled by {producer}")
        elif self.mma and self.ring:
            weights = f"a cp.async ring of {self.ring} stages"
        else:
            weights = "registers"
        out = {"gemv": "tensor cores (mma.sync bf16)" if self.mma else "fp32 FMA", "weights": weights,
               "k_chunk": self.kcb if self.mma else self.kc, "threads": threads or self.launch_threads,
               "consumer_threads": self.threads, "smem_bytes": self.smem_bytes, "attn_split": self.attn_split}
        if consumer_regs:
            out["consumer_regs"] = consumer_regs
        return out

    def offsets(self) -> dict[str, int]:
        return {name: off for name, off, _ in self.regions}

    def check(self, smem_per_block: int) -> list[str]:
        """Problems of the layout itself: regions of one group overlap, or it does not fit."""
        out = []
        # the pipeline's pages and mbarriers are written by the producer while any task runs: they
        # belong to both layouts
        pipe = [r for r in self.regions if r[0] in PIPE_REGIONS]
        groups = {"gemv": [r for r in self.regions if r[0] not in ATTN_REGIONS and r[0] not in ("OFF_FLAG", "OFF_SAMPLE")],
                  "attention": [r for r in self.regions if r[0] in ATTN_REGIONS] + pipe,
                  "argmax": [r for r in self.regions if r[0] == "OFF_SAMPLE"] + pipe}
        for group, regs in groups.items():
            regs = sorted(regs, key=lambda r: r[1])
            for (na, oa, sa), (nb, ob, _) in zip(regs, regs[1:]):
                if oa + sa > ob:
                    out.append(f"shared-memory regions {na} [{oa}, {oa + sa}) and {nb} (at {ob}) of the {group} "
                               f"layout overlap")
        flag = self.offsets().get("OFF_FLAG", 0)
        ends = [o + s for n, o, s in self.regions if n != "OFF_FLAG"]
        if ends and flag < max(ends):
            out.append(f"the flag word at {flag} lies inside a region ending at {max(ends)}")
        if self.smem_bytes > smem_per_block:
            out.append(f"the shared-memory layout needs {self.smem_bytes} B per block, more than the "
                       f"{smem_per_block} B the target allows")
        for name, off, size in self.regions:
            if off % 16:
                out.append(f"shared-memory region {name} at {off} is not 16-byte aligned")
        return out


def _align(n: int, a: int = 16) -> int:
    return -(-n // a) * a


# the attention layout's regions (OFF_AW, the split weights o-proj combines with, is a GEMV region)
ATTN_REGIONS = ("OFF_AQ", "OFF_AK", "OFF_AP", "OFF_AM", "OFF_AKV")

# 16-byte loads per thread for each of K and V that an attention split issues before its wait
ATTN_PRELOAD_LOADS = 2


def attn_preload(hd: int, threads: int, chunk: int) -> int:
    """Positions of K and V an attention split loads before waiting on q: its first ones (all before
    pos), ATTN_PRELOAD_LOADS 16-byte loads per thread for each, at most one tile of ``chunk``. At
    batch 1 that keeps the attention layout near 21 KB (llama-3.2-1b: 64 positions; qwen3-8b: 32)."""
    return max(1, min(chunk, ATTN_PRELOAD_LOADS * threads * 8 // hd))


def attn_partials(hd: int, threads: int, warp: int) -> int:
    """Partial outputs of the weighted sum over V: a thread holds 8 columns of one position group,
    a warp adds its groups with shuffles, so one partial per warp (per group where a row needs more
    than a warp)."""
    return threads // max(hd // 8, warp)


def device_plan(dims: dict, target, knobs: PlanKnobs | None = None) -> DevicePlan:
    """The plan for a task graph's ``dims`` on ``target`` (``mkc.target.Target``)."""
    from mkc.backend import for_target
    from mkc.taskgraph.smem import smem_plan

    o = knobs or PlanKnobs()
    if o.out_pad is None:  # OUT_PAD where the padded block leaves the rest of the plan as it is
        plain = device_plan(dims, target, replace(o, out_pad=0))
        if not plain.mma:
            return plain
        padded = device_plan(dims, target, replace(o, out_pad=OUT_PAD))
        same = (padded.kcb, padded.pipe_slots, padded.ring) == (plain.kcb, plain.pipe_slots, plain.ring)
        return padded if same else plain
    backend = for_target(target)
    caps, limits = backend.capabilities(target), backend.launch_limits(target)
    B, H, I, NH, NKV, HD = dims["B"], dims["H"], dims["I"], dims["nh"], dims["nkv"], dims["hd"]
    NREP = NH // NKV
    split = dims.get("attn_split", 1)
    NT, WARP = limits.threads, caps.warp_size
    NW = NT // WARP
    k_max = max(H, I, NH * HD)
    # Tensor cores for the GEMV kinds from batch 2: there the fp32 FMA path is bound by shared-memory
    # reads of the staged input and by FMAs (each weight is used B times); at batch 1 it is memory
    # bound already. A target without a bf16 MMA keeps FMAs.
    if o.mma and not caps.mma_bf16:
        raise ScheduleError(f"tensor-core GEMV asked for, but {target.name} ({target.arch}) has no bf16 MMA in mkc")
    mma = caps.mma_bf16 and (B >= 2 if o.mma is None else o.mma)
    G = o.rows_per_warp
    # MMA path: U segments per weight row per step, double-buffered (4U loads in flight per lane);
    # past batch 32 the accumulators need the registers of half of them
    U = o.loads_in_flight or ((4 if B <= 32 else 2) if mma else 8 if B <= 2 else 4)
    stage = smem_plan(target, B, k_max)
    KC = max(256, min(dims.get("smem_kc") or stage.kc or 8192, _align(k_max, 256)))
    out_cap = max(4096, HD * B, 2 * B)
    # the output block's rows, padded (tensor-core path): the epilogues read a row's B columns with a
    # warp's lanes on consecutive rows, at a stride of B floats one bank at batch 32 (8 ways at batch
    # 8); B + 2 (even: the tile sums store float2 pairs) puts consecutive rows two banks apart. The
    # block keeps its rows (QKV_ROWS, RESID_RB, GATEUP_RB), so it grows by pad floats a row.
    pad = o.out_pad
    if pad < 0 or pad % 2 or (pad and not mma):
        raise ScheduleError(f"out_pad={o.out_pad!r}: an even number of floats (0 for none) on the tensor-core path")
    out_ld = B + pad
    out_cap = out_cap // B * out_ld if pad else out_cap
    f = 4  # bytes per float / int
    ring, kcb = 0, 0
    # The weight pipeline: batch 1 on the FMA path (one consumer warp per page row), and on the
    # tensor-core path up to batch PIPE_MMA_MAX_BATCH (or asked for), where the target has bulk
    # copies and 8 consumer warps. The FMA path stages the whole input (one K-chunk), so a page is
    # never waited for in the middle of a staging pass; the tensor-core path stages K-chunks of
    # whole pages.
    base_ok = caps.bulk_copy and NW == PIPE_ROWS
    can_pipe = base_ok and ((not mma and B == 1) or (mma and (o.pipe is True or (o.pipe is None and B <= PIPE_MMA_MAX_BATCH))))
    if o.pipe and not (base_ok and (mma or B == 1)):
        raise ScheduleError(f"the weight pipeline needs bulk asynchronous copies and {PIPE_ROWS} consumer warps, "
                            f"batch 1 on the FMA path or the tensor-core path; {target.name} at batch {B} has "
                            f"{'bulk copies' if caps.bulk_copy else 'no bulk copies'}, {NW} warps, "
                            f"{'tensor-core' if mma else 'FMA'} GEMVs")
    pipe_mma = can_pipe and mma
    unit = PIPE_MMA_UNIT if mma else PIPE_COLS
    if o.pipe_cols and o.pipe_cols % unit:
        raise ScheduleError(f"pipeline pages of {o.pipe_cols} columns: the {'tensor-core' if mma else 'FMA'} path's "
                            f"pages are multiples of {unit} columns")
    if mma:
        prows, pcols = PIPE_MMA_ROWS, o.pipe_cols or PIPE_MMA_COLS
        pld = pcols + PIPE_MMA_PAD
    else:
        prows, pcols = PIPE_ROWS, o.pipe_cols or PIPE_COLS
        pld = pcols
    page = prows * pld * 2
    if mma:
        # The input is staged as bf16 [B][XST] with XST = KCB + 32: a row is 64 bytes off 128, so the
        # two batch columns of each 8-lane phase of a 16-byte shared load hit disjoint banks. KCB is
        # the K-chunk: the largest multiple of 64 (of 256 when it can; of a page's columns with the
        # pipeline) that fits what the other regions leave, at most K. A chunk costs a barrier and
        # a pause of the weight stream. The pipeline keeps two row tiles' warp partials.
        def k_chunk(r: int, pages: int = 0) -> int:
            part = NW * 16 * B * (2 if pages else 1)
            rest = (f * (out_cap + part + B + NW * B + 2 * B + B * split * NH) + r * 2 * U * 16 * NT
                    + 8 * 16 + 16 + (pages * (page + 16) + 16 if pages else 0))
            per_row = (target.smem_per_block - rest) // (2 * B) - 32
            if pages:
                return min(_align(k_max, pcols), per_row // pcols * pcols)
            return min(_align(k_max, 256), per_row // 256 * 256 or per_row // 64 * 64)

        pages = 0
        if pipe_mma:
            want = min(o.pipe_pages or PIPE_MMA_PAGES, PIPE_MAX_SLOTS)
            pages = next((p for p in range(want, 1, -1) if k_chunk(0, p) >= pcols), 0)
            if not pages and o.pipe:
                raise ScheduleError(f"batch {B} leaves no room for 2 pipeline pages and a K-chunk of {pcols} in "
                                    f"{target.name}'s shared memory")
            pipe_mma = can_pipe = pages > 0  # else the ring below, as without the pipeline
        if pipe_mma:
            kcb = k_chunk(0, pages)
        else:
            prows, pcols, pld = PIPE_ROWS, PIPE_COLS, PIPE_COLS
            # the deepest weight ring (up to ring_stages) that leaves K-chunks of 1024 (or all of K);
            # past batch 16 the staged input needs the shared memory (H200, llama-3.2-1b, batch 32:
            # 3.01 ms/token with a ring of 3 against 2.27 without; batch 8: 1.32 against 1.53)
            want = o.ring_stages if o.ring_stages is not None else (3 if B <= 16 else 0)
            ring = next((r for r in range(want, 1, -1) if k_chunk(r) >= min(_align(k_max, 256), 1024)), 0)
            kcb = k_chunk(ring)
        if kcb < 64:
            raise ScheduleError(f"batch {B} leaves no room to stage a K-chunk in {target.name}'s shared memory")
        xs_bytes, part_n = 2 * B * (kcb + 32), NW * 16 * B * (2 if pipe_mma else 1)
    else:
        xs_bytes, part_n = f * B * KC, NW * G * B
    pipe_slots = 0
    if can_pipe and not mma and o.pipe is not False:
        KC = _align(k_max, 256)
        xs_bytes = f * B * KC
        # the K-split consumers' warp partials (pipe.cuh pipe_rows_ks): two buffers of PIPE_KS_FLUSH row groups
        part_n = max(part_n, 2 * PIPE_KS_FLUSH * PIPE_ROWS * NW)
    regions: list[tuple[str, int, int]] = []
    at = 0
    gemv = [("OFF_XS", xs_bytes), ("OFF_OUT", f * out_cap), ("OFF_PART", f * part_n), ("OFF_RS", f * B),
            ("OFF_SSP", f * NW * B), ("OFF_BEST", f * 4 * B), ("OFF_AW", f * B * split * NH)]
    if mma and ring:
        gemv.append(("OFF_RING", ring * 2 * U * 16 * NT))
    for name, nbytes in gemv:
        regions.append((name, at, nbytes))
        at = _align(at + nbytes)
    gemv_end = at
    at = 0
    # OFF_AKV holds the K and V rows (bf16) a split loads before its wait, then, once the last tile
    # is done with them, the warps' partial outputs of the weighted sum over V: one region, two uses
    # separated by block barriers (attention.cuh)
    pre = attn_preload(HD, NT, o.attn_chunk)
    kv_bytes = max(2 * 2 * pre * HD, f * attn_partials(HD, NT, WARP) * NREP * HD)
    for name, nbytes in (("OFF_AQ", f * NREP * HD), ("OFF_AK", f * HD), ("OFF_AP", f * NREP * o.attn_chunk),
                         ("OFF_AM", f * 3 * NREP), ("OFF_AKV", kv_bytes)):
        regions.append((name, at, nbytes))
        at = _align(at + nbytes)
    flag = max(gemv_end, at)
    if can_pipe and o.pipe is not False:
        # pages and their mbarriers (full, empty) first, disjoint from both task layouts, in what
        # the block's shared memory leaves (at most PIPE_DEFAULT_PAGES, or the pages asked for; the
        # tensor-core path's K-chunk was sized for its pages above)
        free = target.smem_per_block - flag - 16
        want = (o.pipe_pages or PIPE_MMA_PAGES) if pipe_mma else (o.pipe_pages or PIPE_DEFAULT_PAGES)
        pipe_slots = min(want, PIPE_MAX_SLOTS, free // (page + 16))
        if pipe_slots >= 2:
            base = _align(pipe_slots * page + 2 * 8 * pipe_slots)
            regions = [("OFF_PIPE", 0, pipe_slots * page), ("OFF_MBAR", pipe_slots * page, 16 * pipe_slots)] + \
                [(n, o_ + base, b_) for n, o_, b_ in regions]
            flag += base
        elif o.pipe:
            raise ScheduleError(f"the weight pipeline needs 2 pages of {page} B; batch {B} leaves {free} B")
        else:
            pipe_slots = 0
    regions.append(("OFF_FLAG", flag, 16))
    regions.append(sample_region(regions, B, NW))
    return DevicePlan(
        threads=NT, warp=WARP, gemv=GEMV_MMA if mma else GEMV_FMA, ring=ring, kc=KC, kcb=kcb, rows_per_warp=G,
        loads_in_flight=U, batch_rows=min(B, 8), out_cap=out_cap, out_ld=out_ld, attn_split=split, attn_chunk=o.attn_chunk,
        stages=stage.stages, stage_bytes=stage.stage_bytes, regions=tuple(regions), smem_bytes=flag + 16,
        pipe_slots=pipe_slots, producer_warps=1 if pipe_slots else 0, pipe_rows=prows, pipe_cols=pcols, pipe_ld=pld,
    )
