"""InfiniBand ports: a bit-error rate over ibdiagnet's limit, a step over the port's own
baseline, and link flaps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.detectors.dynamic.baseline import Baseline
from models.detectors.dynamic.family import Flagged, Memo, Rule
from models.detectors.dynamic.hourly import HOUR, nanmean
from models.detectors.dynamic.levels import LevelConfig, growth_fit, history, history_s, level
from models.detectors.evidence import IB_BER
from models.detectors.findings import Finding
from models.detectors.view import FleetView, ScopeView, recent, recent_sum


@dataclass(frozen=True)
class InfinibandConfig(LevelConfig):
    # InfiniBand: ibdiagnet's BER threshold 1e-12; a step of x1000 over the port's baseline.
    ber_limit: float = 1e-12
    ber_step: float = 1000.0
    ber_floor: float = 1e-15


# Short flaps seen by the collector between reads (ib_link_flaps: no link_downed bump, under
# 30 s) count with the recoveries and link-downed events.
FLAPS = ("ib_link_error_recovery", "ib_link_downed", "ib_link_flaps")
IB_BER_RULE = Rule("ib_ber", Scope.IB_PORT, ("ib_ber", *FLAPS), IB_BER,
                   "bit-error rate over the last hour (higher with link flaps)",
                   FailureMode.M4_IB_LINK)
IB_BER_STEP = Rule("ib_ber_step", Scope.IB_PORT, ("ib_ber",), IB_BER,
                   "bit-error rate over the port's own baseline", FailureMode.M4_IB_LINK)
IB_FLAPS = Rule("ib_flaps", Scope.IB_PORT, FLAPS, IB_BER,
                "link error recoveries and link-downed events in the last hour")
# With flaps the link is failing, but days can remain (LOS forecasting: 1-7 days): urgent
# enough to drain at the next boundary, not to page.
BER_WITH_FLAPS_RISK = 0.8


class Infiniband:
    rules: tuple[Rule, ...] = (IB_BER_RULE, IB_BER_STEP, IB_FLAPS)

    def __init__(self, c: InfinibandConfig, memo: Memo) -> None:
        self.c, self.memo = c, memo
        self.ber_base = Baseline(c.baseline_half_life_h)

    def every_tick(self, view: FleetView, now: float) -> list[Finding]:
        return []

    def every_minute(self, view: FleetView) -> list[Finding]:
        return self._ber(view.scope(Scope.IB_PORT))

    def learn(self, view: FleetView, flagged: Flagged) -> None:
        ib = view.scope(Scope.IB_PORT)
        if len(ib):
            ber = nanmean(recent(ib, "ib_ber", HOUR)[0])
            self.ber_base.update(ber, flagged(IB_BER_STEP.name, len(ib)))

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if scope is Scope.IB_PORT:
            self.ber_base.take(keep)

    def _ber(self, ib: ScopeView) -> list[Finding]:
        c, n = self.c, len(ib)
        if n == 0:
            return []
        ber = nanmean(recent(ib, "ib_ber", HOUR)[0])
        flaps = recent_sum(ib, "ib_link_error_recovery", HOUR)
        flaps = np.nan_to_num(flaps) + np.nan_to_num(recent_sum(ib, "ib_link_downed", HOUR))
        flaps += np.nan_to_num(recent_sum(ib, "ib_link_flaps", HOUR))
        base = np.maximum(np.nan_to_num(self.ber_base.get(n), nan=c.ber_floor), c.ber_floor)
        with np.errstate(invalid="ignore"):
            high = ber > c.ber_limit
            step = ber >= c.ber_step * base
        over = np.where(high, c.warn_risk, 0.0)
        over = np.where(high & (flaps > 0), BER_WITH_FLAPS_RISK, over)
        # The BER is a rate, not a count: its growth is read above the floor of noise.
        rate, ttf, days = self.memo.get("ber_growth", ib, history_s(c), lambda: growth_fit(
            c, history(c, ib, ("ib_ber",)), c.ber_floor))
        return [
            IB_BER_RULE.finding(over.astype(np.float32), ber, c.ber_limit, ttf_h=ttf,
                                growth=rate),
            IB_BER_STEP.finding(level(c, step, ttf, None, days, IB_BER_STEP.name), ber / base,
                                c.ber_step, ttf_h=ttf, growth=rate),
            IB_FLAPS.finding(np.where(flaps > 0, np.float32(c.watch_risk - 0.05),
                                      np.float32(0)), flaps, 1.0),
        ]
