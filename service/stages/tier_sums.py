"""Running sums over the last n finished buckets of a rollup tier, per metric and slot.

The rules read "errors in the last hour" as the sum of the last 60 one-minute buckets: at
10,000 GPUs that is 180,000 NVLink links x 60 buckets x 4 counters re-summed every minute,
most of a minute boundary's work. A `WindowSum` keeps that sum as the tier closes buckets: the
closing bucket is added and the bucket leaving the window subtracted (before its row is reused).

Exactly what the re-sum gives (`models.detectors.view.time_total`: NaN where every bucket is
missing, else the float64 sum of the present ones). A float running sum would drift from a
re-sum; integers do not. Error counters are whole counts, so each bucket value that is a whole
number under 2**40 is added to an int64 total, exact in any order, and the float64 re-sum of
such values is exact too (60 of them stay far under 2**53), so both are the same number. A
bucket value that is not (a fraction, a huge value, -0.0) is counted per slot instead, and a
slot holding any is summed from the tier's rows again when read, as the re-sum does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from models.detectors.view import time_total

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I16 = npt.NDArray[np.int16]

# Whole bucket values up to this size are summed as integers: n of them (n < 2**13) stay under
# 2**53, where float64 holds every integer, so the re-sum of them is exact as well.
WHOLE_LIMIT = float(2**40)


class WindowSum:
    """The sum of one column of a tier over its last `n` finished buckets, per slot."""

    def __init__(self, col: int, n: int, capacity: int) -> None:
        self.col = col
        self.n = n
        self.total: I64 = np.zeros(capacity, np.int64)  # whole values
        self.present: I16 = np.zeros(capacity, np.int16)  # buckets holding a value
        self.odd: I16 = np.zeros(capacity, np.int16)  # buckets holding a value not whole
        self.buckets: deque[int] = deque()  # the buckets summed, oldest first

    def _apply(self, values: F32, sign: int) -> None:
        present = ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            whole = (present & (np.floor(values) == values) & (np.abs(values) <= WHOLE_LIMIT)
                     & ~((values == 0) & np.signbit(values)))
        ints = np.where(whole, values, np.float32(0)).astype(np.int64)
        if sign > 0:
            self.total += ints
            self.present += present
            self.odd += present & ~whole
        else:
            self.total -= ints
            self.present -= present
            self.odd -= present & ~whole

    def add(self, agg: F32, held: I64, bucket: int) -> None:
        """The bucket just closed (its row of `agg[metric, row, slot]` written) joins."""
        row = bucket % len(held)
        assert held[row] == bucket
        self._apply(agg[self.col, row, :], +1)
        self.buckets.append(bucket)

    def retire_before(self, agg: F32, held: I64, first: int) -> None:
        """Buckets older than `first` leave the window; their rows still hold them."""
        while self.buckets and self.buckets[0] < first:
            bucket = self.buckets.popleft()
            row = bucket % len(held)
            assert held[row] == bucket, "a summed bucket's row was reused before it left"
            self._apply(agg[self.col, row, :], -1)

    def read(self, agg: F32, held: I64, last: int, n_used: int) -> F64:
        """[slot] the sum of the last n buckets up to `last` (the tier's newest finished)."""
        out: F64 = self.total[:n_used].astype(np.float64)
        out[self.present[:n_used] == 0] = np.nan
        odd = np.flatnonzero(self.odd[:n_used] > 0)
        if len(odd):
            want = np.arange(last - self.n + 1, last + 1, dtype=np.int64)
            rows = (want % len(held)).astype(np.intp)
            win = agg[self.col][rows[:, None], odd[None, :]].T.copy()
            win[:, held[rows] != want] = np.nan
            out[odd] = time_total(win)
        return out

    def resize(self, change: Callable[[npt.NDArray[np.generic], float], object]) -> None:
        """Apply a slot-axis change (grow or squeeze) to every per-slot array; a returned array
        replaces the old one."""
        arrays = (self.total, self.present, self.odd)
        got = [change(a, 0) for a in arrays]
        if all(isinstance(g, np.ndarray) for g in got):
            self.total, self.present, self.odd = got  # type: ignore[assignment]

    def nbytes(self) -> int:
        return self.total.nbytes + self.present.nbytes + self.odd.nbytes
