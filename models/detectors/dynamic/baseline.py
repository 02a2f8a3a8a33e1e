"""A learned per-entity baseline that does not learn from the entities its rule flags."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models.detectors.findings import F64, kept

B = npt.NDArray[np.bool_]


class Baseline:
    """Per-entity EWMA of an hourly quantity; flagged entities do not pull it toward their
    anomaly, so a slowly developing fault cannot teach the baseline that it is normal."""

    def __init__(self, half_life_h: float) -> None:
        self.alpha = 1.0 - 0.5 ** (1.0 / half_life_h)
        self.mean: F64 = np.zeros(0)
        # The worst unflagged hour, decaying with the same half-life: bursty but stable sources
        # (benign correctable-ECC carriers) are judged against their own bursts, not their mean.
        self.peak: F64 = np.zeros(0)
        self.count: npt.NDArray[np.int64] = np.zeros(0, np.int64)

    def _fit(self, n: int) -> None:
        if n > len(self.mean):
            grow = n - len(self.mean)
            self.mean = np.concatenate([self.mean, np.zeros(grow)])
            self.peak = np.concatenate([self.peak, np.zeros(grow)])
            self.count = np.concatenate([self.count, np.zeros(grow, np.int64)])

    def take(self, keep: npt.NDArray[np.intp]) -> None:
        self.mean, self.peak, self.count = (kept(self.mean, keep), kept(self.peak, keep),
                                            kept(self.count, keep))

    def update(self, value: F64, flagged: B) -> None:
        self._fit(len(value))
        ok = np.isfinite(value) & ~flagged
        first = ok & (self.count[: len(value)] == 0)
        m = self.mean[: len(value)]
        m[first] = value[first]
        later = ok & ~first
        m[later] += self.alpha * (value[later] - m[later])
        pk = self.peak[: len(value)]
        pk[ok] = np.maximum(pk[ok] * (1.0 - self.alpha), value[ok])
        self.count[: len(value)] += ok

    def get(self, n: int) -> F64:
        self._fit(n)
        return np.where(self.count[:n] > 0, self.mean[:n], np.nan)

    def get_peak(self, n: int) -> F64:
        self._fit(n)
        return np.where(self.count[:n] > 0, self.peak[:n], np.nan)
