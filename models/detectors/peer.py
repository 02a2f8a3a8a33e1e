"""Peer comparison (Mahalanobis) baseline: an entity is suspect when its last finished hour
looks unlike the rest of the fleet's in that same hour.

Literature baseline (peer comparison, e.g. Minder): unsupervised, no history, no labels. Once
per newly finished hour, for GPUs and IB ports separately:

1. read that hour's per-hour features (`models.predictor.features`), keeping a fixed subset of
   informative columns (`GPU_COLUMNS`, `PORT_COLUMNS`): peer-relative gauges and log error
   counts. Absolute load (utilisation, traffic) is left out: it moves with jobs, not faults;
2. robust z-scores over the fleet: (x - median) / max(1.4826 MAD, q90 / 1.645, floor), q90
   the 90th percentile of |x - median| (see `robust_z`). The floor is per column, in the
   column's units, so a column constant across the fleet (error counts are 0 almost
   everywhere) does not turn one count into a huge z. NaN reads as the median: missing is
   not evidence;
3. squared Mahalanobis distance d^2 = z' R^-1 z, where R is the correlation of the fleet's
   z-scores, winsorised at +-`cov_clip` so a faulty entity cannot inflate its own yardstick
   (masking), and shrunk toward the identity with the Ledoit-Wolf intensity so it is
   invertible with few entities. A correlation rather than a covariance: rescaling by the
   fleet's spread would undo the MAD floor. z itself is clipped at +-`z_clip`;
4. risk from the chi-square tail with k = number of columns: p = P(chi2_k >= d^2); risk 0 for
   p >= 1e-3, then 0.35 / 0.65 / 0.95 for p below 1e-3 / 1e-6 / 1e-9, just above the alert
   policy's watch / warning / critical enter thresholds (0.3 / 0.6 / 0.9). The result is held
   (the same Finding returned) until the next hour finishes, so per-tick cost is a lookup.

Caveat that makes it a baseline: the chi-square tail assumes Gaussian z, so even a perfectly
healthy fleet gives about one watch-level entity per thousand each hour.

NVLink has no finding of its own: a GPU's worst-link error count is one of its columns.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2

from collectors.catalog import Scope
from models.detectors.findings import F32, F64, Finding
from models.detectors.view import FleetView
from models.predictor.features import (
    FEATURES,
    HourlyUnavailable,
    gpu_hours,
    hours_of,
    port_hours,
)

log = logging.getLogger(__name__)

MAD_TO_SD = 1.4826  # MAD of a normal distribution times this is its standard deviation
Q90_TO_SD = 1.6449  # the 90th percentile of |N(0, sd)| is this many sd
LOG_COUNT_FLOOR = 0.5  # log1p scale: one error is z 1.4, a burst of 30 is z 6.9

# Column name -> scale floor, in the feature's own units (see features.py).
GPU_COLUMNS: dict[str, float] = {
    "gpu_temp_vs_peers": 1.0,  # degC: sensors read whole degrees
    "mem_temp_vs_peers": 1.0,
    "power_draw_vs_peers": 0.1,  # units of 100 W: 10 W
    "sm_clock_vs_peers": 0.1,  # units of 100 MHz: 10 MHz
    "ecc_sbe_volatile": LOG_COUNT_FLOOR,
    "ecc_dbe_volatile": LOG_COUNT_FLOOR,
    "ecc_sram_correctable": LOG_COUNT_FLOOR,
    "remapped_rows_correctable": LOG_COUNT_FLOOR,
    "pcie_replay": LOG_COUNT_FLOOR,
    "nvlink_errors_worst": LOG_COUNT_FLOOR,  # CRC errors of the GPU's worst link
}
PORT_COLUMNS: dict[str, float] = {
    "ib_symbol_error": LOG_COUNT_FLOOR,
    "ib_link_error_recovery": LOG_COUNT_FLOOR,
    "ib_link_downed": LOG_COUNT_FLOOR,
    "ib_port_rcv_errors": LOG_COUNT_FLOOR,
    "ib_local_link_integrity_errors": LOG_COUNT_FLOOR,
    "ib_ber_log10": 1.0,  # decades above 1e-18
    "ib_symbol_error_vs_peers": LOG_COUNT_FLOOR,
}
COLUMNS: dict[Scope, dict[str, float]] = {Scope.GPU: GPU_COLUMNS, Scope.IB_PORT: PORT_COLUMNS}
RULES = {Scope.GPU: "mahalanobis_gpu", Scope.IB_PORT: "mahalanobis_ib_port"}
SIGNAL = "distance from the fleet's peers in the last hour (Mahalanobis)"


@dataclass(frozen=True, slots=True)
class PeerConfig:
    p_values: tuple[float, float, float] = (1e-3, 1e-6, 1e-9)  # watch, warning, critical
    risk: tuple[float, float, float] = (0.35, 0.65, 0.95)  # above the alert enter thresholds
    z_clip: float = 50.0  # one wild column must not decide alone how far an entity is
    cov_clip: float = 3.0  # winsorise z for the correlation estimate (against masking)
    min_shrinkage: float = 0.05  # keeps R well conditioned when Ledoit-Wolf says ~0
    min_entities: int = 8  # fewer peers than this: no median worth comparing against

    def __post_init__(self) -> None:
        if list(self.p_values) != sorted(self.p_values, reverse=True):
            raise ValueError("p_values must fall with the level")
        if list(self.risk) != sorted(self.risk):
            raise ValueError("risks must rise with the level")


def column_index(scope: Scope) -> tuple[npt.NDArray[np.intp], F64]:
    """Positions of the chosen columns among the scope's features, and their floors."""
    names = [f.name for f in FEATURES[scope]]
    cols = COLUMNS[scope]
    return (np.array([names.index(c) for c in cols], np.intp),
            np.array(list(cols.values()), np.float64))


def robust_z(x: F64, floor: F64) -> F64:
    """[entity, column] -> robust z-scores over entities; NaN (and all-NaN columns) read 0."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: median NaN
        med = np.nanmedian(x, axis=0)
        dev = np.abs(x - med)
        mad = np.nanmedian(dev, axis=0)
        q90 = np.nanquantile(dev, 0.9, axis=0)
    # Peer-relative columns pile up near 0 (each node's median entity reads 0), which shrinks
    # the MAD below the spread of the tails; the 90th percentile of |x - median| (1.645 sd
    # for a normal) sees the tails and still ignores up to 10 % outliers.
    scale = np.fmax(np.fmax(MAD_TO_SD * np.nan_to_num(mad), np.nan_to_num(q90) / Q90_TO_SD),
                    floor)
    z: F64 = np.nan_to_num((x - med) / scale, nan=0.0, posinf=0.0, neginf=0.0)
    return z


def shrunk_correlation(z: F64, clip: float, min_shrinkage: float) -> F64:
    """Correlation of winsorised z, shrunk toward I with the Ledoit-Wolf intensity. A column
    without spread gets no correlation and unit variance."""
    n, k = z.shape
    w = np.clip(z, -clip, clip)
    w = w - w.mean(axis=0)
    sd = np.sqrt((w * w).mean(axis=0))
    live = sd > 1e-12
    y = np.where(live, w / np.where(live, sd, 1.0), 0.0)
    emp = y.T @ y / n
    s = emp.copy()
    np.fill_diagonal(s, 1.0)  # dead columns too: unit variance, no correlation
    # Ledoit-Wolf (2004) intensity on the standardised data: the sampling noise of s
    # (beta: mean squared distance of each y y' from s, over n) against s's distance from
    # the target (delta).
    delta = float(((s - np.eye(k)) ** 2).sum())
    sq = (y * y).sum(axis=1)
    beta = max(0.0, float((sq * sq).sum() - n * (emp * emp).sum()) / n**2)
    lam = 1.0 if delta <= 0 else min(beta, delta) / delta
    lam = min(1.0, max(lam, min_shrinkage))
    out: F64 = (1 - lam) * s + lam * np.eye(k)
    return out


def distance2(z: F64, corr: F64) -> F64:
    """Squared Mahalanobis distance of each row of z under the correlation corr."""
    out: F64 = np.einsum("ij,ij->i", z @ np.linalg.inv(corr), z)
    return out


class PeerMahalanobis:
    """Hourly Mahalanobis distance of every GPU and IB port from its fleet peers."""

    name = "mahalanobis"

    def __init__(self, config: PeerConfig | None = None) -> None:
        self.c = config or PeerConfig()
        self._hour: int | None = None  # the hour the cached findings describe
        self._cached: dict[Scope, Finding] = {}
        self._told: set[str] = set()

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        try:
            last = hours_of(view.scope(Scope.GPU)).last
        except HourlyUnavailable as e:
            return self._rest(f"no hour buckets: {e}")
        if last < 0:
            return self._rest("no finished hour with data yet")
        if last != self._hour:
            self._hour = last
            hours = {Scope.GPU: gpu_hours(view, 1)[:, 0, :],
                     Scope.IB_PORT: port_hours(view, 1)[:, 0, :]}
            scored = {s: self._score(s, x) for s, x in hours.items()}
            self._cached = {s: f for s, f in scored.items() if f is not None}
        if not self._cached:
            # The store calls the hour before its first sample finished; it holds nothing.
            return self._rest("no finished hour with data yet")
        return [self._fit(f, len(view.scope(s))) for s, f in self._cached.items()]

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if scope in self._cached:
            self._cached[scope] = self._cached[scope].kept(keep)

    def _rest(self, why: str) -> list[Finding]:
        if why not in self._told:
            self._told.add(why)
            log.info("mahalanobis baseline idle: %s", why)
        return []

    def _fit(self, f: Finding, n: int) -> Finding:
        """The cached finding, padded with zero risk for entities that appeared since."""
        if len(f.risk) >= n:
            return f
        pad = n - len(f.risk)
        f = Finding(f.rule, f.scope, np.r_[f.risk, np.zeros(pad, np.float32)],
                    np.r_[f.value, np.zeros(pad)], f.threshold, f.signal)
        self._cached[f.scope] = f
        return f

    def _score(self, scope: Scope, hour: F32) -> Finding | None:
        """The scope's finding for one hour, None when no entity has a reading in it."""
        c = self.c
        idx, floor = column_index(scope)
        x = hour[:, idx].astype(np.float64)
        if np.isnan(x).all():
            return None
        k = len(idx)
        n = len(x)
        q = [float(chi2.isf(p, k)) for p in c.p_values]
        dist = np.zeros(n)
        risk = np.zeros(n, np.float32)
        if n >= c.min_entities:
            z = np.clip(robust_z(x, floor), -c.z_clip, c.z_clip)
            d2 = distance2(z, shrunk_correlation(z, c.cov_clip, c.min_shrinkage))
            dist = np.sqrt(np.maximum(d2, 0.0))
            for qi, r in zip(q, c.risk, strict=True):
                risk[d2 >= qi] = r
        return Finding(RULES[scope], scope, risk, dist, float(np.sqrt(q[0])), SIGNAL)
