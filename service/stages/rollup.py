"""Closing a rollup bucket: the reduction of a bucket's rows, and running sums for the first tier.

A bucket of the first rollup tier (1 min of 5-s samples) used to be made by re-reading its raw
rows once it finished: at 10,000 GPUs (180,000 NVLink links) that re-read was most of the
ingest at a minute boundary. `RunningBucket` folds each raw step into running aggregates (sum,
count, max, min per column and slot) once the clock is a step past it, so closing the bucket
costs the fold of its last steps and one pass that turns the aggregates into the bucket.

Exactly what the re-read gave: steps are folded oldest first in float32, as the reduction over
the rows adds them, and the mean divides in float64 as it did. A raw value that changes after
its step was folded (a resend merged into the step, a lagging entity's late row) marks its slot
`dirty`, and a dirty slot's bucket is reduced from the rows again when the bucket closes. A row
for a step whose bucket already closed reaches the raw ring only, as before: the tier has it not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I16 = npt.NDArray[np.int16]
B = npt.NDArray[np.bool_]
Idx = npt.NDArray[np.intp]

# Steps folded only once the clock is this many steps past them: a row of the previous step
# (a node whose round arrived after another's) lands before its step is folded, not as a
# dirty slot re-read at the boundary.
FOLD_LAG = 1


def reduce_rows(agg: F32, hi: F32, lo: F32, is_counter: B,
                is_state: B) -> tuple[F32 | npt.NDArray[np.float64], F32, F32]:
    """A bucket from its rows: agg[metric, row, slot] (hi/lo: the max/min rows of the gauge
    columns the tier keeps them for), reduced over rows: a counter's sum, a state's max, a
    gauge's mean; those gauges' max and min. NaN where no row held a value."""
    present = ~np.isnan(agg)
    cnt = present.sum(axis=1)
    total = np.where(present, agg, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / cnt
    mean[cnt == 0] = np.nan
    total[cnt == 0] = np.nan
    mx = np.fmax.reduce(agg, axis=1)
    res = np.where(is_counter[:, None], total, np.where(is_state[:, None], mx, mean))
    return res, np.fmax.reduce(hi, axis=1), np.fmin.reduce(lo, axis=1)


class RunningBucket:
    """Running aggregates of the open bucket of the first tier, per metric and slot."""

    def __init__(self, n_metrics: int, hi_cols: Idx, lo_cols: Idx, capacity: int) -> None:
        """hi_cols, lo_cols: the (gauge) columns whose max, whose min the tier keeps; the max
        of every column is summed anyway (a state's bucket is its max)."""
        self.hi_cols, self.lo_cols = hi_cols, lo_cols
        self.bucket = -1  # the bucket being summed
        self.folded = -1  # newest raw step folded into it
        self.total: F32 = np.zeros((n_metrics, capacity), np.float32)
        self.count: I16 = np.zeros((n_metrics, capacity), np.int16)
        self.hi: F32 = np.full((n_metrics, capacity), np.nan, np.float32)
        self.lo: F32 = np.full((len(lo_cols), capacity), np.nan, np.float32)
        self.dirty: B = np.zeros(capacity, bool)

    def _arrays(self) -> tuple[tuple[npt.NDArray[np.generic], float], ...]:
        return ((self.total, 0.0), (self.count, 0), (self.hi, np.nan), (self.lo, np.nan),
                (self.dirty, False))

    def start(self, bucket: int, ratio: int) -> None:
        """Begin summing `bucket` (nothing of it folded yet)."""
        for a, fill in self._arrays():
            a[...] = fill
        self.bucket = bucket
        self.folded = bucket * ratio - 1

    def fold(self, row: F32) -> None:
        """Add one raw step (row[metric, slot]) to the sums."""
        present = ~np.isnan(row)
        np.add(self.total, row, out=self.total, where=present)
        self.count += present
        np.fmax(self.hi, row, out=self.hi)
        np.fmin(self.lo, row[self.lo_cols], out=self.lo)
        self.folded += 1

    def skip(self) -> None:
        """A step the ring does not hold (never opened): nothing to add."""
        self.folded += 1

    def touched(self, slots: npt.NDArray[np.int32], ks: npt.NDArray[np.int64],
                ratio: int) -> None:
        """Raw rows written at steps ks: slots whose step was already folded are dirty."""
        late = (ks <= self.folded) & (ks // ratio == self.bucket)
        if late.any():
            self.dirty[slots[late]] = True

    def close(self, is_counter: B, is_state: B) -> tuple[F32, F32, F32]:
        """The bucket from its sums: (agg, kept max, kept min), as reduce_rows gives."""
        with np.errstate(invalid="ignore", divide="ignore"):
            # float64 division, as the reduction's float32 sum over an int64 count gave
            mean = (self.total.astype(np.float64) / self.count).astype(np.float32)
        empty = self.count == 0
        total = np.where(empty, np.float32(np.nan), self.total)
        mean[empty] = np.nan
        res = np.where(is_counter[:, None], total, np.where(is_state[:, None], self.hi, mean))
        return res.astype(np.float32), self.hi[self.hi_cols], self.lo.copy()

    def grow(self, widen: Callable[[npt.NDArray[np.generic], float], npt.NDArray[np.generic]]
             ) -> None:
        self.total, self.count, self.hi, self.lo, self.dirty = (  # type: ignore[assignment]
            widen(a, fill) for a, fill in self._arrays())

    def take(self, squeeze: Callable[[npt.NDArray[np.generic], float], None]) -> None:
        """Keep the slots a compaction keeps, in their new order: the sums stay with their
        entities as the ring's rows do."""
        for a, fill in self._arrays():
            squeeze(a, fill)

    def nbytes(self) -> int:
        return sum(a.nbytes for a, _ in self._arrays())
