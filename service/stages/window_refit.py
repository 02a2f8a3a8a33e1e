"""Failure windows refitted on the fleet's own alerts and failures.

The shipped calibration (models/artifacts/windows.json) was fitted on simulated fleets; on a
fleet whose failures follow other laws its windows miss far more often than they say (issue 34:
80 % stated, 31 % held on an unseen family). Once a day the shard's writer takes the alerts that
escalated at least LEAD_S ago with a raw window (service/stages/window_ledger.py) and the
failure labels the fleet gave (auto labels and verdicts, overruled ones left out), pairs each
alert with the first failure it could predict between the minimum warning and LEAD_S later
(models.evaluation.windows.pre_failure, as the evaluation scores windows) and fits the split
conformal calibration on them (models.predictor.interval.fit). With at least MIN_ALERTS such
alerts the fleet's calibration replaces the shipped one in every replica (stored in the shared
state; each replica reloads it within RELOAD_S). Alerts younger than LEAD_S are left out: their
failures may still come, and counting them as none would pull every window shorter.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from models.evaluation.events import truth_from_labels
from models.evaluation.matching import DAY, FailureIndex
from models.evaluation.windows import pre_failure
from models.predictor.interval import COVERAGE, MIN_PAIRS, Calibration, fit, set_active
from service.stages.label_store import LabelStore
from service.stages.window_ledger import WindowLedger

log = logging.getLogger(__name__)

LEAD_S = 7 * DAY  # the watch view's lead window: a failure later than this is not the alert's
KEEP_S = 365 * DAY  # escalations kept and fitted on
EVERY_S = DAY
RELOAD_S = 3600.0
MIN_ALERTS = MIN_PAIRS  # pre-failure alerts before the fleet's calibration is used at all
MAX_LABELS = 500_000


@dataclass(slots=True)
class RefitStatus:
    source: str = "shipped"  # or "fleet"
    fitted_at: float | None = None
    fitted_on: str = ""
    pre_failure_alerts: int = 0  # in the newest fit attempt
    last_attempt: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "fitted_at": self.fitted_at, "fitted_on": self.fitted_on,
                "pre_failure_alerts": self.pre_failure_alerts, "needed": MIN_ALERTS,
                "last_attempt": self.last_attempt}


class WindowRefit:
    def __init__(self, ledger: WindowLedger, labels: LabelStore, *,
                 coverage: float = COVERAGE, every_s: float = EVERY_S) -> None:
        self.ledger = ledger
        self.labels = labels
        self.coverage = coverage
        self.every_s = every_s
        self.status = RefitStatus()
        self._loaded_at: float | None = None  # the stored fit's fitted_at now in use
        self._checked = -float("inf")
        self._fitted = -float("inf")
        self.reload(force=True)

    def close(self) -> None:
        """Back to the shipped calibration in this process (a test's pipeline, a restart)."""
        if self._loaded_at is not None:
            set_active(None)
            self._loaded_at = None
        self.ledger.close()

    def reload(self, *, force: bool = False) -> None:
        """Use the stored calibration if it changed (another replica fitted it)."""
        got = self.ledger.calibration()
        if got is None:
            return
        at, cal = got
        if force or at != self._loaded_at:
            set_active(cal)
            self._loaded_at = at
            self.status.source, self.status.fitted_at = "fleet", at
            self.status.fitted_on = cal.fitted_on

    def step(self, now: float, writing: bool) -> None:
        """Each tick: reload hourly; refit daily where this replica writes."""
        if now - self._checked >= RELOAD_S:
            self._checked = now
            self.reload()
        if writing and now - self._fitted >= self.every_s:
            self._fitted = now
            t0 = time.perf_counter()
            self.refit(now)
            log.info("window refit took %.2f s", time.perf_counter() - t0)

    def refit(self, now: float) -> Calibration | None:
        """Fit on the alerts of the last KEEP_S whose lead window has passed; store and use
        the fit when there are enough of them. Returns the fit, None when too few."""
        self.ledger.prune(now - KEEP_S)
        alerts = self.ledger.records(now - KEEP_S, now - LEAD_S)
        rows = [lb.label().to_dict() for lb in self.labels.find(
            since=now - KEEP_S, kind="failure", overruled=False, limit=MAX_LABELS)]
        failures = list(truth_from_labels(rows).failures)
        pres = pre_failure(alerts, failures, FailureIndex(failures))
        self.status.pre_failure_alerts, self.status.last_attempt = len(pres), now
        if len(pres) < MIN_ALERTS:
            log.info("window refit: %d pre-failure alerts, %d needed; the %s calibration "
                     "stands", len(pres), MIN_ALERTS, self.status.source)
            return None
        first, last = alerts[0].time, alerts[-1].time
        cal = fit((pair for p in pres for pair in p.pairs()), self.coverage,
                  f"this fleet: {len(pres)} pre-failure alerts of {_day(first)} to "
                  f"{_day(last)} (service/stages/window_refit.py)")
        self.ledger.save_calibration(cal, now)
        self.reload(force=True)
        log.info("failure windows refitted on %d of this fleet's pre-failure alerts", len(pres))
        return cal


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")
