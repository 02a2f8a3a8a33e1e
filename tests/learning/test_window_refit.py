"""Failure windows refitted on the fleet's own alerts: each escalation's raw windows are kept,
paired with the failure labels that followed, and once enough alerts have had their lead window
pass, the fitted calibration replaces the shipped one for every replica (stored in the shared
state) and shows in `/v1/models`; too few alerts leave the shipped one and say how many more
are needed; alerts whose lead window has not passed are not counted as failure-free; a
pipeline that closes hands the process back to the shipped calibration."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.detectors.findings import Finding
from models.detectors.fusion import ScopeRisk
from models.predictor.interval import (
    GROWTH,
    active_calibration,
    default_calibration,
    set_active,
)
from models.predictor.interval import shown as pick
from models.predictor.raw_windows import candidates
from service.stages.alert_machine import Transition
from service.stages.label_store import LabelStore, NewLabel
from service.stages.window_ledger import WindowLedger
from service.stages.window_refit import LEAD_S, MIN_ALERTS, WindowRefit

HOUR = 3600.0
DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01


@pytest.fixture(autouse=True)
def shipped_again() -> Iterator[None]:
    yield
    set_active(None)


def _growth(ttf_h: float, n: int = 1) -> ScopeRisk:
    """One GPU whose ECC growth rule says `ttf_h` hours to failure."""
    f = Finding("growth_ecc", Scope.GPU, np.full(n, 0.6, np.float32), np.zeros(n), 1.0,
                "ECC growth", ttf_h=np.full(n, ttf_h), mode="M1_hbm")
    return ScopeRisk(np.full(n, 0.6, np.float32), np.zeros(n, bool), [f])


def _escalation(at: float, entity: str, new: int = 1, old: int = 0) -> Transition:
    node = entity.split(":")[0]
    return Transition(Scope.GPU, 0, entity, node, old, new, at, 0.6)


def _stores(tmp: Path) -> tuple[WindowLedger, LabelStore]:
    db = str(tmp / "state.db")
    return WindowLedger(db), LabelStore(db)


def _history(ledger: WindowLedger, labels: LabelStore, n: int, start: float,
             lead_h: float = 30.0, estimate_h: float = 10.0) -> None:
    """n GPUs, each: an escalation with a growth estimate of `estimate_h`, then an HBM
    failure `lead_h` (+ up to 20 %) later."""
    for i in range(n):
        at = start + i * 6 * HOUR
        entity = f"n{i}:gpu0"
        ledger.note([_escalation(at, entity)], {Scope.GPU: _growth(estimate_h)}, None)
        labels.add([NewLabel("failure", at + lead_h * HOUR * (1 + 0.2 * i / n), f"n{i}",
                             entity, Scope.GPU, "rule:dbe", mode=FailureMode("M1_hbm"))], at)


def test_escalations_keep_their_raw_windows(tmp_path: Path) -> None:
    ledger, _ = _stores(tmp_path)
    sr = _growth(12.0)
    kept = ledger.note([_escalation(T0, "n1:gpu0", 1, 0), _escalation(T0, "n1:gpu0", 1, 2),
                        _escalation(T0, "n1:gpu0", 2, 2)], {Scope.GPU: sr}, None)
    assert kept == 1  # only the escalation: a de-escalation or an unchanged level is not one
    (rec,) = ledger.records(T0 - 1, T0 + 1)
    assert rec.entity == "n1:gpu0" and rec.level == 1 and rec.prev == 0
    (w,) = rec.windows
    assert w.source == GROWTH and w.mode == "M1_hbm" and w.estimate_h == 12.0
    # No window held (no growth estimate, no model): nothing to learn from, nothing kept.
    empty = ScopeRisk(np.ones(1, np.float32), np.zeros(1, bool), [])
    assert ledger.note([_escalation(T0 + 5, "n2:gpu0")], {Scope.GPU: empty}, None) == 0


def test_enough_followed_alerts_refit_the_windows_for_every_replica(tmp_path: Path) -> None:
    ledger, labels = _stores(tmp_path)
    n = MIN_ALERTS + 10
    _history(ledger, labels, n, T0)
    now = T0 + n * 6 * HOUR + LEAD_S + DAY
    refit = WindowRefit(ledger, labels)
    cal = refit.refit(now)
    assert cal is not None and refit.status.source == "fleet"
    assert refit.status.pre_failure_alerts == n
    assert active_calibration() is not default_calibration()
    lo, hi = cal.growth["M1_hbm"]  # the failure came 3 to 3.6 times the estimate later
    assert lo >= 2.9 and hi <= 3.7
    iv = pick(candidates(None, _growth(10.0), 0), active_calibration())
    assert iv is not None and iv.holds(33.0) and "80% of such alerts" in iv.text()
    assert "this fleet: 30 pre-failure alerts" in cal.fitted_on
    # Another replica (its own process: here, a second refit object on the shared state)
    # takes the stored fit when it loads; back to the shipped one when it closes.
    set_active(None)
    other = WindowRefit(WindowLedger(str(tmp_path / "state.db")), labels)
    assert other.status.source == "fleet" and active_calibration().growth == cal.growth  # type: ignore[union-attr]
    other.close()
    assert active_calibration() is default_calibration()


def test_too_few_alerts_leave_the_shipped_windows_and_say_why(tmp_path: Path) -> None:
    ledger, labels = _stores(tmp_path)
    _history(ledger, labels, MIN_ALERTS - 1, T0)
    refit = WindowRefit(ledger, labels)
    assert refit.refit(T0 + 30 * DAY) is None
    st = refit.status.as_dict()
    assert st["source"] == "shipped" and st["pre_failure_alerts"] == MIN_ALERTS - 1
    assert st["needed"] == MIN_ALERTS
    assert active_calibration() is default_calibration()


def test_alerts_whose_lead_window_has_not_passed_are_not_counted(tmp_path: Path) -> None:
    ledger, labels = _stores(tmp_path)
    n = MIN_ALERTS + 5
    _history(ledger, labels, n, T0)
    last = T0 + (n - 1) * 6 * HOUR
    # A week after the first alerts only: the later ones may still be followed by failures.
    refit = WindowRefit(ledger, labels)
    assert refit.refit(last + LEAD_S - 10 * 6 * HOUR) is None
    assert refit.status.pre_failure_alerts < n
    # The daily step refits on its own once their lead windows have passed.
    refit.step(last + LEAD_S + 1, writing=True)
    assert refit.status.source == "fleet" and refit.status.pre_failure_alerts == n
    # A replica that does not write never refits, but follows the stored fit.
    set_active(None)
    follower = WindowRefit(ledger, labels)
    follower.step(last + LEAD_S + 2 * DAY, writing=False)
    assert follower.status.last_attempt is None and follower.status.source == "fleet"


def test_an_unreadable_stored_calibration_keeps_the_shipped_one(tmp_path: Path) -> None:
    ledger, labels = _stores(tmp_path)
    with ledger.transaction() as db:
        db.execute("INSERT INTO window_calibration (id, fitted_at, body) VALUES (1, 1, '{')")
    refit = WindowRefit(ledger, labels)
    assert refit.status.source == "shipped" and active_calibration() is default_calibration()


def test_a_pipeline_keeps_what_its_escalations_showed(tmp_path: Path) -> None:
    """The whole path: a simulated fleet through the pipeline with the auto-labeller; its
    escalations with a window land in the ledger, and /v1/models' learning section says the
    windows are still the shipped ones and how many followed alerts it has."""
    from models.evaluation.rounds import feed_rounds
    from models.evaluation.sources import simulator_source
    from models.simulator.config import SimConfig
    from models.simulator.scenarios import scenario_tree
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.runtime.retrain import learning_status
    from service.settings import Settings
    from service.stages.windows import window_config_for

    tree = scenario_tree("ci", seed=4)
    tree["fleet"]["nodes"] = 4
    tree["time"]["days"] = 3
    tree["failures"]["rate_multiplier"] = 300.0
    cfg = SimConfig.model_validate(tree)
    s = Settings(window=window_config_for(cfg.time.step_s),
                 storage={"data_dir": str(tmp_path)})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "a.db"), autolabel=True))
    try:
        assert p.windows is not None
        src = simulator_source(cfg)
        for r in feed_rounds(src.chunks, src.step_s):
            p.process(r.batch, r.now)
        recs = p.windows.ledger.records(0, math.inf)
        assert recs and all(r.windows and r.level > r.prev for r in recs)
        st = learning_status(p, cfg.time.end_s)["windows"]
        assert st["source"] == "shipped" and st["needed"] == MIN_ALERTS
        assert st["last_attempt"] is not None  # tried on its first tick: too few yet
    finally:
        p.close()
