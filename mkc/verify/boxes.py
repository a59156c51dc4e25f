"""Boxes (half-open intervals per dimension) and an index that finds the boxes overlapping one:
the geometry the verifier's race, coverage and NaN-sentinel checks are written in."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

Box = tuple[tuple[int, int], ...]



def fmt_box(buffer: str, box: Box) -> str:
    return f"{buffer}[{', '.join(f'{lo}:{hi}' for lo, hi in box)}]"


def overlap(a: Box, b: Box) -> bool:
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b))


def intersect(a: Box, b: Box) -> Box:
    return tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))


def box_minus(a: Box, b: Box) -> list[Box]:
    """``a`` without ``b``, as disjoint boxes."""
    if not overlap(a, b):
        return [a]
    out, rest = [], list(a)
    for d, ((a0, a1), (b0, b1)) in enumerate(zip(a, b)):
        if a0 < b0:
            out.append(tuple(rest[:d] + [(a0, b0)] + rest[d + 1:]))
        if b1 < a1:
            out.append(tuple(rest[:d] + [(b1, a1)] + rest[d + 1:]))
        rest[d] = (max(a0, b0), min(a1, b1))
    return out


def uncovered(box: Box, covers: list[Box]) -> list[Box]:
    left = [box]
    for c in covers:
        left = [piece for b in left for piece in box_minus(b, c)]
        if not left:
            break
    return left


class BoxIndex:
    """Boxes of one buffer, found by overlap through cells along the dimension that cuts them most."""

    def __init__(self, boxes: list[Box]):
        self.boxes = boxes
        ndim = len(boxes[0]) if boxes else 0
        self.dim = max(range(ndim), key=lambda d: len({b[d] for b in boxes}), default=0)
        self.cuts = sorted({x for b in boxes for x in b[self.dim]}) if boxes else [0, 1]
        self.cells: list[list[int]] = [[] for _ in range(max(1, len(self.cuts) - 1))]
        for i, b in enumerate(boxes):
            for c in range(*self._cells(b)):
                self.cells[c].append(i)

    def _cells(self, box: Box) -> tuple[int, int]:
        lo, hi = box[self.dim]
        return max(0, bisect_right(self.cuts, lo) - 1), min(len(self.cells), bisect_left(self.cuts, hi))

    def query(self, box: Box) -> list[int]:
        c0, c1 = self._cells(box)
        found = set()
        for c in range(c0, c1):
            found.update(self.cells[c])
        return [i for i in sorted(found) if overlap(self.boxes[i], box)]
