"""NVLink links: CRC and replay errors that recur on one link, or repeated recoveries
(docs/simulator.md, M3)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.detectors.dynamic.baseline import Baseline
from models.detectors.dynamic.family import B, Flagged, Memo, Rule
from models.detectors.dynamic.hourly import HOUR, hourly_total
from models.detectors.dynamic.levels import LevelConfig, growth_fit, history_h, level
from models.detectors.evidence import NVLINK_ERRORS
from models.detectors.findings import F64, Finding
from models.detectors.view import FleetView, ScopeView, recent_sum, slot_ranges


@dataclass(frozen=True)
class NvlinkConfig(LevelConfig):
    # NVLink: errors that recur on one link, or repeated recoveries (6.3, M3).
    nvl_min_errors: float = 50.0
    nvl_factor: float = 10.0
    nvl_recoveries: float = 2.0
    nvl_recur_hours: int = 4  # of the last 6 h with errors: recoveries recur with shrinking gaps


ERRORS = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay")  # counted in the last hour
NVL_ALL = (*ERRORS, "nvlink_recovery")  # fitted as one growth, and an hour's activity
NVLINK_ERRORS_RULE = Rule("nvlink_errors", Scope.NVLINK, NVL_ALL, NVLINK_ERRORS,
                          "NVLink CRC and replay errors in the last hour", FailureMode.M3_NVLINK)
# NVLink slots the hour-resolution rules read at once. At 180,000 links the four counters' 48-h
# windows, their float64 hourly sums and the growth fit's arrays were about 270 MB of
# temporaries at once, the process's peak at an hour's first tick; a slice's are about 15 MB.
# Every quantity is per link, so the slices give the whole's numbers.
SLOT_CHUNK = 16_384


class Nvlink:
    rules: tuple[Rule, ...] = (NVLINK_ERRORS_RULE,)

    def __init__(self, c: NvlinkConfig, memo: Memo) -> None:
        self.c, self.memo = c, memo
        self.nvl_base = Baseline(c.baseline_half_life_h)

    def every_tick(self, view: FleetView, now: float) -> list[Finding]:
        return []

    def every_minute(self, view: FleetView) -> list[Finding]:
        return self.findings(view.scope(Scope.NVLINK))

    def learn(self, view: FleetView, flagged: Flagged) -> None:
        nvl = view.scope(Scope.NVLINK)
        if len(nvl):
            self.nvl_base.update(_errors(nvl, HOUR), flagged(NVLINK_ERRORS_RULE.name, len(nvl)))

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if scope is Scope.NVLINK:
            self.nvl_base.take(keep)

    def findings(self, nvl: ScopeView) -> list[Finding]:
        c, n = self.c, len(nvl)
        if n == 0:
            return []
        errs = _errors(nvl, HOUR)
        recov = np.nan_to_num(recent_sum(nvl, "nvlink_recovery", HOUR))
        learned = self.nvl_base.get(n)
        base = np.where(np.isnan(learned), np.inf, learned)
        hours = self.memo.get("nvl_hours", nvl, 6 * HOUR, lambda: active_hours(nvl, 6))
        with np.errstate(invalid="ignore"):
            rising = (errs >= c.nvl_min_errors) & (errs >= c.nvl_factor * np.maximum(base, 1.0))
        recurs = (rising | (recov > 0)) & (hours >= c.nvl_recur_hours)
        fires = rising | (recov >= c.nvl_recoveries) | recurs
        rate, ttf, days = self.growth(nvl)
        return [NVLINK_ERRORS_RULE.finding(
            level(c, fires, ttf, recurs, days, NVLINK_ERRORS_RULE.name), errs, c.nvl_min_errors,
            ttf_h=ttf, growth=rate)]

    def growth(self, nvl: ScopeView) -> tuple[F64, F64, B | None]:
        """The links' growth fit over the counters' hour sums, a slice of slots at a time."""
        c, hours = self.c, history_h(self.c)

        def make() -> tuple[F64, F64, B | None]:
            n = len(nvl)
            rate, ttf = np.full(n, np.nan), np.full(n, np.nan)
            days: B | None = np.zeros(n, bool) if c.fitted_days_keep_watch else None
            for part in slot_ranges(nvl, SLOT_CHUNK):
                r, t, d = growth_fit(c, hourly_total(nvl, NVL_ALL, hours, part))
                rate[part], ttf[part] = r, t
                if days is not None and d is not None:
                    days[part] = d
            return rate, ttf, days

        return self.memo.get("nvl_growth", nvl, hours * HOUR, make)


def _errors(nvl: ScopeView, seconds: float) -> F64:
    total: F64 = np.zeros(len(nvl))
    seen = np.zeros(len(nvl), bool)
    for metric in ERRORS:
        s = recent_sum(nvl, metric, seconds)
        seen |= ~np.isnan(s)
        total += np.nan_to_num(s)
    total[~seen] = np.nan
    return total


def active_hours(nvl: ScopeView, hours: int) -> npt.NDArray[np.int64]:
    """Per link, how many of the last `hours` hours had any NVLink error or recovery."""
    out = np.zeros(len(nvl), np.int64)
    for part in slot_ranges(nvl, SLOT_CHUNK):
        out[part] = np.sum(hourly_total(nvl, NVL_ALL, hours, part) > 0, axis=1)
    return out
