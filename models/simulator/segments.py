"""Rate segments: counters that grow as a Poisson process at a given rate (IB symbol errors).

Counts are drawn per 60-s bin on an absolute grid, lazily, one day of bins at a time from a
stream keyed by (segment, block), so a segment costs memory only while it is being rendered and
the counts do not depend on the sample step: a 300-s stream reads the same cumulative counts as
the 5-s one at the times they share. Inside a bin the count is spread linearly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.simulator.topology import rng_for

F64 = npt.NDArray[np.float64]
BIN_S = 60  # resets and segment edges are aligned to this grid
BLOCK_BINS = 1440  # one day of bins per lazily drawn block
STREAM_SEGMENT = 900


@dataclass(slots=True)
class Piece:
    """One reset-free stretch: contributes C(min(t, until)) - C(start) on [start, hold)."""

    start: float
    until: float
    hold: float
    c_start: float | None = None
    c_until: float | None = None


@dataclass(slots=True)
class Segment:
    """Rate r0 (events/s) on [t0, t_rise), then growing exponentially to r1 at t1."""

    seg_id: int
    scope: Scope
    ent: int
    column: str
    t0: float
    t1: float
    r0: float
    t_rise: float
    r1: float
    pieces: list[Piece] = field(default_factory=list)
    _bases: list[float] = field(default_factory=list)
    _blocks: dict[int, F64] = field(default_factory=dict)

    @property
    def nbins(self) -> int:
        return round((self.t1 - self.t0) / BIN_S)

    def _expected(self, a: F64, b: F64) -> F64:
        tr = self.t_rise
        flat = self.r0 * (np.minimum(b, tr) - np.minimum(a, tr))
        if self.t1 <= tr or self.r1 <= self.r0:
            return np.asarray(flat + self.r0 * (np.maximum(b, tr) - np.maximum(a, tr)))
        k = math.log(self.r1 / self.r0) / (self.t1 - tr)
        hi = np.exp(k * (np.maximum(b, tr) - tr))
        lo = np.exp(k * (np.maximum(a, tr) - tr))
        grow = self.r0 / k * (hi - lo)
        return np.asarray(flat + grow)

    def _block(self, seed: int, j: int) -> F64:
        """Exclusive prefix counts of block j's bins, offset by all earlier blocks."""
        got = self._blocks.get(j)
        if got is not None:
            return got
        while len(self._bases) <= j:
            i = len(self._bases)
            prev = 0.0 if i == 0 else self._bases[-1] + float(self._counts(seed, i - 1).sum())
            self._bases.append(prev)
        counts = self._counts(seed, j)
        prefix = self._bases[j] + np.concatenate(([0.0], np.cumsum(counts)))
        self._blocks[j] = prefix
        return prefix

    def _counts(self, seed: int, j: int) -> F64:
        lo = j * BLOCK_BINS
        hi = min(self.nbins, lo + BLOCK_BINS)
        edges = self.t0 + BIN_S * np.arange(lo, hi + 1, dtype=np.float64)
        lam = np.maximum(self._expected(edges[:-1], edges[1:]), 0.0)
        rng = rng_for(seed, STREAM_SEGMENT, self.seg_id, j)
        return np.asarray(rng.poisson(lam), dtype=np.float64)

    def cum(self, seed: int, q: F64) -> F64:
        """Cumulative count at times q (any order, within the blocks still cached or ahead)."""
        n = self.nbins
        b = np.floor((np.asarray(q, dtype=np.float64) - self.t0) / BIN_S)
        out = np.zeros(len(q))
        inside = (b >= 0) & (b < n)
        after = b >= n
        if after.any():
            last = (n - 1) // BLOCK_BINS
            out[after] = self._block(seed, last)[-1]
        if inside.any():
            bi = b[inside].astype(np.int64)
            frac = (q[inside] - (self.t0 + bi * BIN_S)) / BIN_S
            res = np.empty(len(bi))
            for j in np.unique(bi // BLOCK_BINS):
                sel = bi // BLOCK_BINS == j
                pre = self._block(seed, int(j))
                local = bi[sel] - j * BLOCK_BINS
                count = pre[local + 1] - pre[local]
                res[sel] = pre[local] + np.floor(count * frac[sel])
            out[inside] = res
        return out

    def clear_cache(self) -> None:
        """Forget drawn blocks and resolved piece values (a new render starts from scratch)."""
        self._blocks.clear()
        for p in self.pieces:
            p.c_start = p.c_until = None

    def forget_before(self, t: float) -> None:
        """Drop cached blocks wholly before t (their totals stay in the running bases)."""
        if not math.isfinite(t):
            return
        keep = int((t - self.t0) // BIN_S) // BLOCK_BINS - 1
        for j in [j for j in self._blocks if j < keep]:
            del self._blocks[j]


def split_at_resets(seg: Segment, resets: F64) -> list[Piece]:
    """Pieces between the resets (sorted times) that zero this segment's counter."""
    pieces: list[Piece] = []
    start = seg.t0
    for r in (float(r) for r in resets if r > seg.t0):
        pieces.append(Piece(start, min(seg.t1, r), r))
        if r >= seg.t1:
            return pieces
        start = r
    pieces.append(Piece(start, seg.t1, math.inf))
    return pieces
