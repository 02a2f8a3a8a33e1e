"""What ingest last read per entity slot: the one owner of a scope's counter state.

Per slot and metric the last value and its sender timestamp, per slot the raw step it last
wrote, and per slot and metric how many refused decreases of a persistent counter came in a row
(service/stages/ingest.py turns cumulative counters into per-step increases from these). Only
this class writes them; the window store (service/stages/windows.py) sizes and compacts them with
its other per-slot arrays, and readers get read-only views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I16 = npt.NDArray[np.int16]
Slots = npt.NDArray[np.int32] | npt.NDArray[np.intp]
Bools = npt.NDArray[np.bool_]
A = TypeVar("A", bound=npt.NDArray[Any])


@dataclass(frozen=True, slots=True)
class Previous:
    """What some slots held before a row of each: values and times [row, metric], steps [row]."""

    values: F64
    ts: F64
    steps: I64


def _read_only(a: A) -> A:
    v = a.view()
    v.flags.writeable = False
    return v


class CounterState:
    """Last value, time and step per slot of one scope, and the drop streaks of its counters."""

    def __init__(self, capacity: int, n_metrics: int) -> None:
        self._val: F64 = np.full((capacity, n_metrics), np.nan)
        self._ts: F64 = np.full((capacity, n_metrics), np.nan)
        self._k: I64 = np.full(capacity, -1, np.int64)
        # Consecutive refused decreases of a persistent counter, per entity and metric.
        self._streak: I16 = np.zeros((capacity, n_metrics), np.int16)
        self._views()

    def _views(self) -> None:
        # Made once per allocation (a compaction moves slots in place, a growth reallocates),
        # so a reader's look costs an attribute read.
        self.last_val: F64 = _read_only(self._val)
        self.last_ts: F64 = _read_only(self._ts)
        self.last_k: I64 = _read_only(self._k)

    # ---- ingest ------------------------------------------------------------------------------
    def steps(self, slots: Slots) -> I64:
        """The raw step each slot last wrote (-1: never)."""
        out: I64 = self._k[slots]
        return out

    def previous(self, slots: Slots) -> Previous:
        """What the slots hold now, gathered (one row per slot; a slot appears at most once)."""
        return Previous(self._val[slots], self._ts[slots], self._k[slots])

    def count_drops(self, slots: Slots, dropped: Bools, missing: Bools, after: int) -> Bools:
        """Count refused decreases in a row per (row's slot, metric): a drop adds one, a reading
        that does not drop clears the count, a gap (`missing`) keeps it. Where the count
        reaches `after`, the counter is a new device: those are returned, their counts reset."""
        held = self._streak[slots]
        streak = np.where(dropped, held + 1, 0)
        streak = np.where(missing, held, streak)
        rebase: Bools = dropped & (streak >= after)
        if rebase.any():
            streak = np.where(rebase, 0, streak)
        self._streak[slots] = streak
        return rebase

    def record(self, slots: Slots, ks: I64, ts: npt.NDArray[np.float64], values: F64,
               present: Bools, before: Previous) -> None:
        """After one row per slot (values [row, metric], read at ts [row], raw step ks [row]):
        a present value and its time replace what was held; a missing one keeps it."""
        self._val[slots] = np.where(present, values, before.values)
        self._ts[slots] = np.where(present, ts[:, None], before.ts)
        self._k[slots] = ks

    def forget_values(self, slots: Slots) -> None:
        """Another device now answers in these slots (a GPU's board swapped, as its identity
        said): its counters start from their next reading, neither a drop nor an increase."""
        self._val[slots] = np.nan
        self._streak[slots] = 0

    # ---- sizing, with the window store -------------------------------------------------------
    def _arrays(self) -> tuple[tuple[npt.NDArray[np.generic], float], ...]:
        return ((self._val, np.nan), (self._ts, np.nan), (self._k, -1), (self._streak, 0))

    def grow(self, widen: Callable[[npt.NDArray[np.generic], float],
                                   npt.NDArray[np.generic]]) -> None:
        """Reallocate along the slot axis (the first) with `widen(array, fill)`."""
        self._val, self._ts, self._k, self._streak = (  # type: ignore[assignment]
            widen(a, fill) for a, fill in self._arrays())
        self._views()

    def take(self, squeeze: Callable[[npt.NDArray[np.generic], float], None]) -> None:
        """Keep the slots a compaction keeps, in their new order, moved in place by
        `squeeze(array, fill)` along the slot axis (the first)."""
        for a, fill in self._arrays():
            squeeze(a, fill)

    def nbytes(self) -> int:
        return sum(a.nbytes for a, _ in self._arrays())
