"""Long memory: each entity's own usual over its last few days, read from the window store's
daily buckets, as per-hour model inputs.

A 24-hour window cannot tell a GPU that has logged a few hundred correctable errors an hour
for a month (a benign chronic carrier) from one whose errors started this morning; its own
past can. So every hour's inputs carry the entity's usual level over the `USUAL_DAYS` finished
days before that hour's day (its usual error rate, remaps, temperature offset against its peers,
how many of those days it reported, days since each error group was last active), and the
hour's value against that usual.

Each hour reads only the days that had finished when the hour did, and a finished day bucket
never changes, so the dataset builder (one hour at a time) and the live detector (a window of
hours at once) compute the same numbers. The default store keeps 7 daily buckets: a 48-hour
window's hours need at most 7 days in all (the 5 before the oldest hour's day, and 2 newer).
Without a daily tier the inputs are NaN (the scaler reads them as unknown).
"""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt

from models.detectors.view import ScopeView

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

DAY = 86400.0
USUAL_DAYS = 5


def day_tier(view: ScopeView) -> tuple[str, int] | None:
    """The name and length of the scope's daily tier, None when the store keeps none."""
    for t in view.tier_specs:
        if abs(t.step_s - DAY) < 1e-9:
            return t.name, t.length
    return None


class DailyHistory:
    """The finished days a window of n hours (ending at absolute hour `last`) reads, and for
    each of its hours the span of days that hour may see."""

    def __init__(self, view: ScopeView, last: int, n: int) -> None:
        self.view = view
        self.n_ent = len(view)
        self.n = n
        hours = last - n + 1 + np.arange(n, dtype=np.int64)
        # The days before each hour's own day (all finished once the hour is, at any step).
        seen = hours // 24 - 1
        found = day_tier(view)
        self.tier = found[0] if found is not None else None
        newest = view.finished(self.tier) if self.tier is not None else -1
        length = found[1] if found is not None else 0
        seen = np.minimum(seen, newest)
        oldest = int(seen.min()) - USUAL_DAYS + 1 if n else newest
        self.k = int(np.clip(newest - oldest + 1, 1, max(length, 1)))
        first = newest - self.k + 1
        self.hi = (seen - first).astype(np.int64)  # inclusive column of each hour's newest day
        self.lo = self.hi - USUAL_DAYS + 1
        self.available = self.tier is not None and newest >= 0

    def read(self, metric: str) -> F32:
        """[entity, k] daily buckets (counters: the day's sum; gauges: its mean)."""
        if not self.available or self.tier is None:
            return np.full((self.n_ent, self.k), np.nan, np.float32)
        return self.view.window(metric, self.k, tier=self.tier)

    def _spans(self, x: F32) -> tuple[F32, F32]:
        """Per [entity, hour]: the sum of x's non-NaN days in the hour's span, and their count."""
        z = np.concatenate([np.zeros((x.shape[0], 1), np.float64),
                            np.cumsum(np.nan_to_num(x), axis=1, dtype=np.float64)], axis=1)
        c = np.concatenate([np.zeros((x.shape[0], 1), np.float64),
                            np.cumsum(~np.isnan(x), axis=1, dtype=np.float64)], axis=1)
        lo = np.clip(self.lo, 0, self.k)
        hi = np.clip(self.hi + 1, 0, self.k)
        total = (z[:, hi] - z[:, lo]).astype(np.float32)
        count = (c[:, hi] - c[:, lo]).astype(np.float32)
        return total, count

    def mean(self, x: F32) -> F32:
        """Per [entity, hour]: the mean of the hour's days (NaN when none reported)."""
        total, count = self._spans(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            out: F32 = np.where(count > 0, total / count, np.nan).astype(np.float32)
        return out

    def total(self, x: F32) -> F32:
        total, count = self._spans(x)
        out: F32 = np.where(count > 0, total, np.nan).astype(np.float32)
        return out

    def known(self, x: F32) -> F32:
        """Share of the hour's days on which x was reported (a swapped-in GPU starts at 0)."""
        _, count = self._spans(x)
        out: F32 = (count / USUAL_DAYS).astype(np.float32)
        return out

    def days_since(self, active: B) -> F32:
        """Per [entity, hour]: days since the newest active day of the span, over
        USUAL_DAYS + 1 (1/6: yesterday; 1: not within the span), as a share."""
        cols = np.arange(self.k, dtype=np.int64)
        idx = np.where(active, cols[None, :], -1)
        newest = np.maximum.accumulate(idx, axis=1) if self.k else idx
        at = np.clip(self.hi, 0, self.k - 1)
        last = newest[:, at]  # [entity, hour]
        ago = np.where(last >= self.lo[None, :], self.hi[None, :] - last + 1, USUAL_DAYS + 1)
        out: F32 = (np.minimum(ago, USUAL_DAYS + 1) / (USUAL_DAYS + 1)).astype(np.float32)
        return out


def usual_log_rate(daily_counts: F32, hist: DailyHistory) -> F32:
    """The usual hourly increase of a counter over the span, on the hourly log1p scale."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out: F32 = np.log1p(np.clip(hist.mean(daily_counts) / 24.0, 0.0, None))
    return out
