"""CPU simulator: runs a TaskGraph task by task in fp32, honouring its events.

Each task kind (a ``_<kind>`` method) is implemented from kinds.py's table, reading only through its task's declared
regions, so the simulator checks lowering three ways:

- a task runs only when every event it waits on has all its signals (else ``EventNotReady``);
- a task reads and writes only inside its declared regions (else ``SimulationError``);
- a task reads only data already written in this step (activations, and the caches at ``pos``),
  and no element is written twice (else ``SimulationError``): an event that fired too early, or a
  region that does not say what the task touches, is caught here and not in a hanging kernel.

``run_step`` picks a random valid order by seed, so tests can try many interleavings.
Caches are fp32 ``[B, nkv, L, hd]`` tensors updated in place, as in ``mkc.capture.reference``.
"""

from __future__ import annotations

import heapq
import itertools
import random

import torch

from mkc.errors import MkcError
from mkc.taskgraph import names
from mkc.taskgraph.lower import LM_CAND, LM_CAND_HEAD, LM_CAND_WORDS, LM_PREF
from mkc.taskgraph.ir import Task, TaskGraph
from mkc.taskgraph.kinds import AttnArgs, BatchArgs, DownkArgs, EmbedArgs, LmheadArgs, QkvArgs, RowArgs, args_of
from mkc.taskgraph.tiling import attn_split_range, qkv_segments

Box = tuple[tuple[int, int], ...]


class EventNotReady(MkcError):
    """A task ran before an event it waits on had fired."""

    exit_code = 1


class SimulationError(MkcError):
    """A task touched data outside its regions, read data not yet written, or wrote twice."""

    exit_code = 1


def _desc(t: Task) -> str:
    where = f" l{t.layer}" if t.layer >= 0 else ""
    return f"task {t.id} ({t.kind}{where} args {list(t.args)})"


def topo_order(tg: TaskGraph, seed: int | None = None) -> list[int]:
    """A valid execution order: lowest id first, or a random ready task each time when seeded."""
    rng = random.Random(seed)
    missing = [len(t.waits) for t in tg.tasks]
    remaining = [e.triggers for e in tg.events]
    waiters: list[list[int]] = [[] for _ in tg.events]
    for t in tg.tasks:
        for e in t.waits:
            waiters[e].append(t.id)
    ready = [t.id for t in tg.tasks if not t.waits]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        if seed is None:
            tid = heapq.heappop(ready)
        else:
            i = rng.randrange(len(ready))
            ready[i], ready[-1] = ready[-1], ready[i]
            tid = ready.pop()
        order.append(tid)
        for e in tg.tasks[tid].signals:
            remaining[e] -= 1
            if remaining[e] == 0:
                for w in waiters[e]:
                    missing[w] -= 1
                    if missing[w] == 0:
                        if seed is None:
                            heapq.heappush(ready, w)
                        else:
                            ready.append(w)
    if len(order) != len(tg.tasks):
        stuck = next(t for t in tg.tasks if t.id not in set(order))
        raise EventNotReady(f"no valid order: {_desc(stuck)} can never run (its events never fire)")
    return order


def _rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _first_argmax(x: torch.Tensor) -> torch.Tensor:
    """Per row, the lowest index holding the row's maximum."""
    hit = x == x.max(dim=-1, keepdim=True).values
    idx = torch.arange(x.shape[-1]).expand_as(x)
    return torch.where(hit, idx, x.shape[-1]).min(dim=-1).values


class _Sim:
    def __init__(self, tg: TaskGraph, weights, caches, input_ids, pos: int):
        self.tg = tg
        self.d = dict(tg.dims)
        self.c = dict(tg.consts)
        self.pos = int(pos)
        self.meta = {b.name: b for b in tg.buffers}
        self.data: dict[str, torch.Tensor] = {}
        self.valid: dict[str, torch.Tensor] = {}  # written this step (caches: at pos, per [B, nkv, hd])
        B = tg.batch
        for b in tg.buffers:
            if b.role == "weight":
                self.data[b.name] = weights[b.name].float()
            elif b.role == "const":
                self.data[b.name] = torch.tensor(b.data, dtype=torch.float32).reshape(b.shape)
            elif b.role == "cache":
                self.data[b.name] = caches[b.name]
                self.valid[b.name] = torch.zeros(b.shape[:2] + b.shape[3:], dtype=torch.bool)
            elif b.role in ("act", "output"):
                dt = {"i64": torch.int64, "i32": torch.int32}.get(b.dtype, torch.float32)
                self.data[b.name] = torch.full(b.shape, -1 if dt != torch.float32 else float("nan"), dtype=dt)
                self.valid[b.name] = torch.zeros(b.shape, dtype=torch.bool)
        self.data["ids"] = input_ids.reshape(B).long()
        self.data["pos"] = torch.tensor([self.pos])
        self.counts = [0] * len(tg.events)
        self.done: set[int] = set()

    # ---- region-checked access ------------------------------------------------------------
    def _inside(self, t: Task, regions, name: str, box: Box, verb: str) -> None:
        meta = self.meta[name]
        if meta.role == "cache" and verb == "writes":
            L = meta.shape[2]
            box = box[:2] + (((L - 1, L) if box[2] == (self.pos, self.pos + 1) else box[2]),) + box[3:]
        for r in regions:
            if r.buffer == name and all(rl <= lo and hi <= rh for (lo, hi), (rl, rh) in zip(box, r.box)):
                return
        raise SimulationError(f"{_desc(t)} {verb} {name}{list(box)} outside its declared regions")

    def read(self, t: Task, name: str, *box) -> torch.Tensor:
        box = tuple(box)
        self._inside(t, t.reads, name, box, "reads")
        sl = tuple(slice(lo, hi) for lo, hi in box)
        meta = self.meta[name]
        if meta.role == "cache":
            if box[2][1] > self.pos and not self.valid[name][sl[:2] + sl[3:]].all():
                raise SimulationError(f"{_desc(t)} reads {name} at pos {self.pos} before it is written")
        elif name in self.valid and not self.valid[name][sl].all():
            raise SimulationError(f"{_desc(t)} reads {name}{list(box)} before it is written: a missing dependency")
        return self.data[name][sl]

    def write(self, t: Task, name: str, box: Box, value: torch.Tensor) -> None:
        self._inside(t, t.writes, name, box, "writes")
        sl = tuple(slice(lo, hi) for lo, hi in box)
        vsl = sl[:2] + sl[3:] if self.meta[name].role == "cache" else sl
        if self.valid[name][vsl].any():
            raise SimulationError(f"{_desc(t)} writes {name}{list(box)} a second time in one step")
        value = value.reshape(self.data[name][sl].shape)
        if self.meta[name].dtype == "bf16" and self.meta[name].role in ("act", "output"):
            value = value.to(torch.bfloat16).float()  # kept as f32 here, with the bits the device stores (lower(h_bf16))
        self.data[name][sl] = value.to(self.data[name].dtype)
        self.valid[name][vsl] = True

    # ---- the residual stream's normed bf16 companions (lower(xn_bf16=True)) -------------------
    def _xn(self) -> bool:
        return names.xn_of("x0") in self.meta

    def normed(self, t: Task, act: str, norm: str) -> torch.Tensor:
        """rmsnorm(act) * w as a GEMV reads it: from act and the norm's weights, or with xn_bf16 from
        act's bf16 copy times w and its sums of squares by 8 columns (1/rms applied to the copy
        here; the device applies it to the dot products, which is the same product)."""
        B, H = self.tg.batch, self.d["H"]
        if not self._xn():
            return _rmsnorm(self.read(t, act, (0, B), (0, H)), self.read(t, norm, (0, H)), self.c["rms_eps"])
        xw = self.read(t, names.xn_of(act), (0, B), (0, H))
        ss = self.read(t, names.xss_of(act), (0, B), (0, H // names.XN_GROUP)).sum(-1, keepdim=True)
        return xw * torch.rsqrt(ss / H + self.c["rms_eps"])

    def write_normed(self, t: Task, act: str, norm: str, c0: int, c1: int, x: torch.Tensor) -> None:
        """Columns [c0, c1) of residual-stream activation ``act`` = x, and with xn_bf16 its companions."""
        B, G = self.tg.batch, names.XN_GROUP
        self.write(t, act, ((0, B), (c0, c1)), x)
        if self._xn():
            self.write(t, names.xn_of(act), ((0, B), (c0, c1)), x * self.read(t, norm, (c0, c1)))
            self.write(t, names.xss_of(act), ((0, B), (c0 // G, c1 // G)), x.pow(2).reshape(B, -1, G).sum(-1))

    # ---- execution -------------------------------------------------------------------------
    def run(self, t: Task) -> None:
        if t.id in self.done:
            raise SimulationError(f"{_desc(t)} runs twice in one step")
        for e in t.waits:
            ev = self.tg.events[e]
            if self.counts[e] < ev.triggers:
                raise EventNotReady(f"{_desc(t)} ran before event {e} ({ev.name}) fired: "
                                    f"{self.counts[e]} of {ev.triggers} signals")
        getattr(self, "_" + t.kind)(t, args_of(t))
        self.done.add(t.id)
        for e in t.signals:
            self.counts[e] += 1

    def _embed(self, t: Task, a: EmbedArgs) -> None:
        B, V = self.tg.batch, self.d["V"]
        c0, c1 = a.c0, a.c1
        ids = self.read(t, "ids", (0, B))
        table = self.read(t, names.EMBED, (0, V), (c0, c1))
        self.write_normed(t, "x0", names.norm_into(0, self.d["n_layers"]), c0, c1, table[ids])

    def _qkv(self, t: Task, a: QkvArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        H, hd, nh, nkv = d["H"], d["hd"], d["nh"], d["nkv"]
        half = hd // 2
        xn = self.normed(t, names.x_in(l), names.layer_weight(l, "input_norm"))
        self.read(t, "pos", (0, 1))
        for (ha, hb, p0, p1), (role, s0, s1) in itertools.product(
                qkv_segments(a.h0, a.h1, a.p0, a.p1, half),
                (("q", 0, nh), ("k", nh, nh + nkv), ("v", nh + nkv, nh + 2 * nkv))):
            whole = (p0, p1) == (0, half)
            for h in range(max(ha, s0) - s0, min(hb, s1) - s0):
                # the head's rows in task order: [p0, p1) and [hd/2 + p0, hd/2 + p1), or [2p0, 2p1) for v
                if whole:
                    spans = [(h * hd, (h + 1) * hd)]
                elif role == "v":
                    spans = [(h * hd + 2 * p0, h * hd + 2 * p1)]
                else:
                    spans = [(h * hd + p0, h * hd + p1), (h * hd + half + p0, h * hd + half + p1)]
                w = torch.cat([self.read(t, names.layer_weight(l, role), sp, (0, H)) for sp in spans])
                y = xn @ w.T
                if d["qkv_bias"]:
                    y = y + torch.cat([self.read(t, names.layer_weight(l, role + "_bias"), sp) for sp in spans])
                if role != "v" and not d["qk_norm"]:  # with q/k norm, attention norms and rotates
                    y = self._rope(t, y, p0, p1)
                at = 0
                for r0, r1 in spans:
                    part = y[:, at: at + r1 - r0]
                    at += r1 - r0
                    if role == "q":
                        self.write(t, f"q.{l}", ((0, B), (r0, r1)), part)
                    elif role == "k" and d["qk_norm"]:
                        self.write(t, names.k_raw(l), ((0, B), (r0, r1)), part)
                    else:
                        cache = names.k_cache(l) if role == "k" else names.v_cache(l)
                        c0, c1 = r0 - h * hd, r1 - h * hd
                        self.write(t, cache, ((0, B), (h, h + 1), (self.pos, self.pos + 1), (c0, c1)), part)

    def _rope(self, t: Task, y: torch.Tensor, p0: int, p1: int) -> torch.Tensor:
        """RoPE (rotate-half) at pos on rows [p0..p1) | [hd/2+p0..hd/2+p1) of y's last dimension."""
        n = p1 - p0
        ang = float(self.pos) * self.read(t, "inv_freq", (p0, p1))
        cos, sin = ang.cos() * self.c["rope_scaling"], ang.sin() * self.c["rope_scaling"]
        x1, x2 = y[..., :n], y[..., n:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def _attn(self, t: Task, a: AttnArgs) -> None:
        d, l, b, g, s = self.d, t.layer, a.b, a.g, a.s
        hd, n_rep, T, eps = d["hd"], d["n_rep"], self.pos + 1, self.c["rms_eps"]
        S = d.get("attn_split", 1)
        lo, hi = attn_split_range(s, S, T, d.get("attn_split_pos", 0))  # only the last reaches pos
        cols = (g * n_rep * hd, (g + 1) * n_rep * hd)
        self.read(t, "pos", (0, 1))
        kc, vc = names.k_cache(l), names.v_cache(l)
        if d.get("qkv_sum", 1) > 1:
            return self._attn_sum(t, a)
        q = self.read(t, f"q.{l}", (b, b + 1), cols).reshape(n_rep, hd)

        def cache(name, a, z):
            if a >= z:
                return self.data[name].new_zeros((0, hd)).float()
            return self.read(t, name, (b, b + 1), (g, g + 1), (a, z), (0, hd)).reshape(z - a, hd).float()

        if d["qk_norm"]:
            # q and the new key arrive raw: norm over the head, RoPE, the key into the cache at pos
            q = self._rope(t, _rmsnorm(q, self.read(t, names.layer_weight(l, "q_norm"), (0, hd)), eps), 0, hd // 2)
            k = cache(kc, lo, min(hi, self.pos))
            if hi == T:
                kn = _rmsnorm(self.read(t, names.k_raw(l), (b, b + 1), (g * hd, (g + 1) * hd)),
                              self.read(t, names.layer_weight(l, "k_norm"), (0, hd)), eps)
                kn = self._rope(t, kn, 0, hd // 2)
                self.write(t, kc, ((b, b + 1), (g, g + 1), (self.pos, self.pos + 1), (0, hd)), kn)
                k = torch.cat([k, kn.to(self.data[kc].dtype).float().reshape(1, hd)])
        else:
            k = cache(kc, lo, hi)
        v = cache(vc, lo, hi)
        sc = (q @ k.T) * self.c["attn_scale"]  # [n_rep, hi - lo]
        if S == 1:
            self.write(t, f"attn.{l}", ((b, b + 1), cols), torch.softmax(sc, dim=-1) @ v)
            return
        if hi > lo:
            lse = torch.logsumexp(sc, dim=-1)
            o = torch.exp(sc - lse[:, None]) @ v
        else:
            lse, o = torch.full((n_rep,), float("-inf")), torch.zeros(n_rep, hd)
        self.write(t, names.attn_out(l), ((b, b + 1), (s, s + 1), cols), o)
        self.write(t, names.attn_lse(l), ((b, b + 1), (s, s + 1), (g * n_rep, (g + 1) * n_rep)), lse)

    def _attn_sum(self, t: Task, a: AttnArgs) -> None:
        """Unsplit attention over qkv's partial products (lower(qkv_sum=C)): the chunks added in
        order, times 1/rms of the input (from its sums of squares), plus the bias; q/k norm and RoPE
        on q and the key; the key and value appended at pos; then attention over [0, pos]."""
        d, l, b, g = self.d, t.layer, a.b, a.g
        hd, n_rep, nh, nkv, H, C, eps = d["hd"], d["n_rep"], d["nh"], d["nkv"], d["H"], d["qkv_sum"], self.c["rms_eps"]
        QD, KD, W = nh * hd, nkv * hd, names.layer_weight
        self.read(t, "pos", (0, 1))
        ss = self.read(t, names.xss_of(names.x_in(l)), (b, b + 1), (0, H // names.XN_GROUP)).sum()
        rinv = torch.rsqrt(ss / H + eps)
        qp = names.qkv_parts(l)

        def head(r0, r1, bias, b0):
            p = self.read(t, qp, (0, C), (b, b + 1), (r0, r1)).reshape(C, r1 - r0)
            y = p[0]
            for c in range(1, C):  # in chunk order, as the device adds them
                y = y + p[c]
            y = y * rinv
            if d["qkv_bias"]:
                y = y + self.read(t, W(l, bias), (b0, b0 + r1 - r0))
            return y

        q = head(g * n_rep * hd, (g + 1) * n_rep * hd, "q_bias", g * n_rep * hd).reshape(n_rep, hd)
        k = head(QD + g * hd, QD + (g + 1) * hd, "k_bias", g * hd).reshape(1, hd)
        v = head(QD + KD + g * hd, QD + KD + (g + 1) * hd, "v_bias", g * hd).reshape(1, hd)
        if d["qk_norm"]:
            q = _rmsnorm(q, self.read(t, W(l, "q_norm"), (0, hd)), eps)
            k = _rmsnorm(k, self.read(t, W(l, "k_norm"), (0, hd)), eps)
        q, k = self._rope(t, q, 0, hd // 2), self._rope(t, k, 0, hd // 2)
        kc, vc = names.k_cache(l), names.v_cache(l)
        at = ((b, b + 1), (g, g + 1), (self.pos, self.pos + 1), (0, hd))
        self.write(t, kc, at, k)
        self.write(t, vc, at, v)

        def cache(name, new):  # positions before pos, then the new row as the cache holds it
            old = (self.read(t, name, (b, b + 1), (g, g + 1), (0, self.pos), (0, hd)).reshape(self.pos, hd).float()
                   if self.pos > 0 else self.data[name].new_zeros((0, hd)).float())
            return torch.cat([old, new.to(self.data[name].dtype).float()])

        sc = (q @ cache(kc, k).T) * self.c["attn_scale"]
        self.write(t, f"attn.{l}", ((b, b + 1), (g * n_rep * hd, (g + 1) * n_rep * hd)),
                   torch.softmax(sc, dim=-1) @ cache(vc, v))

    def _qkvp(self, t: Task, a: DownkArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1, k0, k1 = a
        hd, nh, nkv = d["hd"], d["nh"], d["nkv"]
        c = k0 // (d["H"] // d["qkv_sum"])
        x = self.read(t, names.xn_of(names.x_in(l)), (0, B), (k0, k1))
        ws = []
        for role, s0, s1 in (("q", 0, nh * hd), ("k", nh * hd, (nh + nkv) * hd), ("v", (nh + nkv) * hd, (nh + 2 * nkv) * hd)):
            if max(r0, s0) < min(r1, s1):
                ws.append(self.read(t, names.layer_weight(l, role), (max(r0, s0) - s0, min(r1, s1) - s0), (k0, k1)))
        self.write(t, names.qkv_parts(l), ((c, c + 1), (0, B), (r0, r1)), (x @ torch.cat(ws).T)[None])

    def _oproj(self, t: Task, rows: RowArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1 = rows.r0, rows.r1
        nh, hd, S = d["nh"], d["hd"], d.get("attn_split", 1)
        QD = nh * hd
        if S == 1:
            a = self.read(t, f"attn.{l}", (0, B), (0, QD))
        else:  # combine the splits: weights softmax(lse) over the splits, per batch row and head
            o = self.read(t, names.attn_out(l), (0, B), (0, S), (0, QD)).reshape(B, S, nh, hd)
            w = torch.softmax(self.read(t, names.attn_lse(l), (0, B), (0, S), (0, nh)), dim=1)
            a = (w[..., None] * o).sum(dim=1).reshape(B, QD)
        x = self.read(t, names.x_in(l), (0, B), (r0, r1))
        w = self.read(t, names.layer_weight(l, "o"), (r0, r1), (0, QD))
        self.write_normed(t, f"xa.{l}", names.layer_weight(l, "post_norm"), r0, r1, x + a @ w.T)

    def _gateup(self, t: Task, a: RowArgs) -> None:
        l, B, H = t.layer, self.tg.batch, self.d["H"]
        r0, r1 = a.r0, a.r1
        xn = self.normed(t, f"xa.{l}", names.layer_weight(l, "post_norm"))
        g = xn @ self.read(t, names.layer_weight(l, "gate"), (r0, r1), (0, H)).T
        u = xn @ self.read(t, names.layer_weight(l, "up"), (r0, r1), (0, H)).T
        self.write(t, f"h.{l}", ((0, B), (r0, r1)), torch.nn.functional.silu(g) * u)

    def _down(self, t: Task, a: RowArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1 = a.r0, a.r1
        h = self.read(t, f"h.{l}", (0, B), (0, d["I"]))
        x = self.read(t, f"xa.{l}", (0, B), (r0, r1))
        w = self.read(t, names.layer_weight(l, "down"), (r0, r1), (0, d["I"]))
        self.write_normed(t, f"xm.{l}", names.norm_into(l + 1, self.d["n_layers"]), r0, r1, x + h @ w.T)

    def _downk(self, t: Task, a: DownkArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1, k0, k1 = a
        C, I = d["down_split"], d["I"]
        c = k0 // (I // C)
        h = self.read(t, f"h.{l}", (0, B), (k0, k1))
        w = self.read(t, names.layer_weight(l, "down"), (r0, r1), (k0, k1))
        part = names.down_partial(l)
        prev = self.read(t, f"xa.{l}", (0, B), (r0, r1)) if c == 0 else self.read(t, part, (c - 1, c), (0, B), (r0, r1))[0]
        y = prev + h @ w.T
        if c == C - 1:
            self.write(t, f"xm.{l}", ((0, B), (r0, r1)), y)
        else:
            self.write(t, part, ((c, c + 1), (0, B), (r0, r1)), y)

    def _downp(self, t: Task, a: DownkArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1, k0, k1 = a
        c = k0 // (d["I"] // d["down_sum"])
        h = self.read(t, f"h.{l}", (0, B), (k0, k1))
        w = self.read(t, names.layer_weight(l, "down"), (r0, r1), (k0, k1))
        self.write(t, names.down_parts(l), ((c, c + 1), (0, B), (r0, r1)), (h @ w.T)[None])

    def _dsum(self, t: Task, a: RowArgs) -> None:
        d, l, B = self.d, t.layer, self.tg.batch
        r0, r1, C = a.r0, a.r1, d["down_sum"]
        p = self.read(t, names.down_parts(l), (0, C), (0, B), (r0, r1))
        s = p[0]
        for c in range(1, C):  # in chunk order, as the device adds them
            s = s + p[c]
        x = self.read(t, f"xa.{l}", (0, B), (r0, r1))
        self.write_normed(t, f"xm.{l}", names.norm_into(l + 1, self.d["n_layers"]), r0, r1, x + s)

    def _lmhead(self, t: Task, a: LmheadArgs) -> None:
        B, H = self.tg.batch, self.d["H"]
        r0, r1, k = a.r0, a.r1, a.t
        xf = self.normed(t, names.x_in(self.d["n_layers"]), names.FINAL_NORM)
        logits = xf @ self.read(t, names.lm_head_weight(bool(self.d["tied"])), (r0, r1), (0, H)).T
        self.write(t, "logits", ((0, B), (r0, r1)), logits)
        self.write(t, "amax_part", ((0, B), (k, k + 1)), logits.max(dim=-1).values)
        self.write(t, "amax_idx", ((0, B), (k, k + 1)), r0 + _first_argmax(logits))
        # the filtered sampler's candidates (sampling.cuh lm_candidates): the tile's largest logits
        # (fp32 bits, index) sorted by value (ties by index) after a count, the order key of the
        # smallest kept one when the tile was cut and that of the LM_PREF-th when the tile had more
        # than LM_PREF; unused slots (0, -1)
        C = LM_CAND
        n = min(C, r1 - r0)
        lf = logits.float().contiguous()
        u = lf.view(torch.int32).long() & 0xFFFFFFFF
        keys = torch.where(u >= 1 << 31, (~u) & 0xFFFFFFFF, u | (1 << 31))  # order keys (sampling.cuh)
        order = torch.sort(-keys, dim=-1, stable=True).indices[:, :n]  # descending; ties by index
        vals = lf.gather(1, order)
        cand = torch.zeros((B, C, 2), dtype=torch.int32)
        cand[:, :, 1] = -1
        cand[:, :n, 0] = vals.contiguous().view(torch.int32)
        cand[:, :n, 1] = (r0 + order).int()

        def key_of(col):
            u = vals[:, col:col + 1].contiguous().view(torch.int32).long() & 0xFFFFFFFF
            return torch.where(u >= 1 << 31, (~u) & 0xFFFFFFFF, u | (1 << 31))[:, 0]  # order key (sampling.cuh)

        zero = torch.zeros(B, dtype=torch.long)
        head = torch.stack([torch.full((B,), n, dtype=torch.long), key_of(n - 1) if r1 - r0 > C else zero,
                            key_of(LM_PREF - 1) if r1 - r0 > LM_PREF else zero]
                           + [zero] * (LM_CAND_HEAD - 3), 1)
        head = torch.where(head >= 1 << 31, head - (1 << 32), head).int()
        # (the noise words after the pairs: the kernel's tiles write them only with cand_noise)
        block = torch.cat([head, cand.reshape(B, 2 * C), torch.zeros((B, LM_PREF), dtype=torch.int32)], 1)
        self.write(t, names.LM_CAND, ((0, B), (LM_CAND_WORDS * k, LM_CAND_WORDS * (k + 1))), block)

    def _argmax(self, t: Task, a: BatchArgs) -> None:
        T = self.d["n_lm_tiles"]
        part = self.read(t, "amax_part", (a.b0, a.b1), (0, T))
        idx = self.read(t, "amax_idx", (a.b0, a.b1), (0, T)).long()
        best = _first_argmax(part)  # tiles are in vocabulary order: the first maximal tile has the lowest index
        self.write(t, "next_ids", ((a.b0, a.b1),), idx.gather(1, best[:, None])[:, 0])


def run_step(
    tg: TaskGraph,
    weights: dict[str, torch.Tensor],
    caches: dict[str, torch.Tensor],
    input_ids: torch.Tensor,
    pos: int,
    *,
    seed: int | None = None,
    order: list[int] | None = None,
) -> dict[str, torch.Tensor]:
    """One decode step. ``order``: exactly these task ids in this order (checked); else a valid
    order, random by ``seed`` (None: by task id). Updates ``caches`` in place; returns every
    activation and output buffer (``logits``, ``next_ids``, ``q.0``...) and the caches."""
    if not 0 <= int(pos) < tg.max_seq_len:
        raise ValueError(f"pos {pos} outside the cache (max_seq_len {tg.max_seq_len})")
    sim = _Sim(tg, weights, caches, input_ids, pos)
    for tid in topo_order(tg, seed) if order is None else order:
        sim.run(tg.tasks[tid])
    if len(sim.done) != len(tg.tasks):
        left = next(t for t in tg.tasks if t.id not in sim.done)
        raise SimulationError(f"the step ended without running {len(tg.tasks) - len(sim.done)} tasks, "
                              f"e.g. {_desc(left)}")
    return {name: sim.data[name] for name in sim.valid}
