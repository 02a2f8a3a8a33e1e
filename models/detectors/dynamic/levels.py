"""What every dynamic rule family shares: the risk of each alert level, the baselines'
half-life, and how a growth rule's level follows its predicted time (models/detectors/growth.py).
Each family's config extends `LevelConfig`; `DynamicConfig` (detector.py) is all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from models.detectors.dynamic.hourly import HOUR, hourly
from models.detectors.findings import F64
from models.detectors.growth import GrowthConfig, assess, level_risk
from models.detectors.view import ScopeView

B = npt.NDArray[np.bool_]


# Not slots: the families' configs extend it side by side, and DynamicConfig extends them all.
@dataclass(frozen=True)
class LevelConfig:
    watch_risk: float = 0.35
    warn_risk: float = 0.65
    crit_risk: float = 0.95
    baseline_half_life_h: float = 72.0
    # When: growth rules take their level from the predicted time (models/detectors/growth.py).
    growth: GrowthConfig = field(default_factory=GrowthConfig)
    # False: the recurrence tests alone set warning, estimate or not (the rules before they had
    # a time; kept to measure the change against).
    levels_follow_ttf: bool = True
    # The rules on which a stream the fit has read for min_blocks blocks, and whose point growth
    # says days (or no growth), stays at watch instead of taking the recurrence route to warning
    # (growth.settled). NVLink only: on the ci tuning seeds 2000-2002 it removes NVLink warning
    # false alarms raised days ahead, while on sbe_growth it cost an HBM detection (docs/design.md,
    # "growth"). Empty: the recurrence decides every stream with no estimate.
    fitted_days_keep_watch: tuple[str, ...] = ("nvlink_errors",)


def level(c: LevelConfig, fires: B, ttf: F64, recurs: B | None = None, days: B | None = None,
          rule: str = "") -> npt.NDArray[np.float32]:
    """Level from the predicted time where there is one, else from `recurs` (the rule's
    recurrence test; None: watch at most) unless `days` says the fit reads as days and
    `rule` is one of fitted_days_keep_watch."""
    days = days if rule in c.fitted_days_keep_watch else None
    return level_risk(fires, ttf, c.growth, c.watch_risk, c.warn_risk, c.crit_risk, recurs,
                      c.levels_follow_ttf, days)


def growth_fit(c: LevelConfig, per_hour: F64, floor: float = 1.0) -> tuple[F64, F64, B | None]:
    """(growth, time to failure, fitted-days mask or None when no rule uses it)."""
    rate, ttf, days = assess(per_hour, c.growth, floor)
    return rate, ttf, days if c.fitted_days_keep_watch else None


def history_h(c: LevelConfig) -> int:
    """The growth fit's span in hours."""
    return c.growth.block_h * c.growth.blocks


def history_s(c: LevelConfig) -> float:
    return history_h(c) * HOUR


def history(c: LevelConfig, v: ScopeView, metrics: tuple[str, ...]) -> F64:
    """[entity, hour] over the growth fit's span: the larger of the metrics' hourly sums
    (the volatile and aggregate counters count the same errors; either may be missing)."""
    hours = history_h(c)
    out: F64 = np.max([hourly(v, m, hours) for m in metrics], axis=0)
    return out
