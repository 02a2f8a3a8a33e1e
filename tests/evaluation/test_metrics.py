"""Scores on hand-built runs, a perfect oracle and a random alerter."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.catalog import Scope
from models.evaluation.events import AlertRecord, Failure
from models.evaluation.matching import DAY, HOUR, MINUTE, default_views, match
from models.evaluation.metrics import (
    combined_pages,
    delay_stats,
    lead_stats,
    trap_shares,
    view_scores,
)
from models.evaluation.riskscore import average_precision
from models.evaluation.score import EvalConfig
from service.stages.alert_machine import AlertPolicy

T0 = 1_735_689_600.0
WATCH = default_views()[0]


def gpu(i: int) -> str:
    return f"n{i // 8}:gpu{i % 8}"


def test_precision_recall_three_ways_and_false_alarm_rate() -> None:
    t = T0 + 10 * DAY
    failures = [
        Failure(t, gpu(0), Scope.GPU, "n0", "M1_hbm", t - DAY),  # detected
        Failure(t, gpu(1), Scope.GPU, "n0", "M1_hbm", t - DAY),  # missed
        Failure(t, gpu(8), Scope.GPU, "n1", "M2_gpu_hard", None),  # abrupt, missed
        Failure(t, "n2", Scope.NODE, "n2", "M7_unobservable", None),  # unobservable, missed
    ]
    alerts = [AlertRecord(t - 3 * HOUR, gpu(0), Scope.GPU, "n0", 2),
              AlertRecord(t - 3 * DAY, gpu(30), Scope.GPU, "n3", 1)]  # a false alarm
    s = view_scores(match(alerts, failures, WATCH), failures, node_days=500.0)
    assert s["precision"] == 0.5
    assert s["recall_precursor"] == 0.5
    assert s["recall_observable"] == pytest.approx(1 / 3)
    assert s["recall_all"] == 0.25
    assert s["f1"] == 0.5
    assert s["fa_per_1000_node_days"] == 2.0
    assert s["lead"]["median_h"] == 3.0
    assert s["by_mode"]["M1_hbm"]["recall_precursor"] == 0.5
    assert s["by_scope"]["gpu"] == {"detected": 1, "false_alarms": 1, "precision": 0.5}
    # The time split counts failures and false alarms by when they happen.
    first = view_scores(match(alerts, failures, WATCH), failures, 250.0, (T0, t - 2 * DAY))
    assert first["failures"] == 0 and first["false_alarms"] == 1


def test_lead_stats() -> None:
    s = lead_stats([0.5 * HOUR, 2 * HOUR, 30 * HOUR, 40 * HOUR])
    assert s["n"] == 4 and s["median_h"] == 16.0
    assert s["share_ge_1h"] == 0.75 and s["share_ge_24h"] == 0.5
    assert s["share_6_24h"] == 0.0
    s = lead_stats([5.9 * HOUR, 6 * HOUR, 24 * HOUR, 24.1 * HOUR])
    assert s["share_6_24h"] == 0.5  # both ends count
    assert lead_stats([])["median_h"] is None


def _fleet(rng: np.random.Generator, n: int, entities: int, days: float) -> list[Failure]:
    times = np.sort(rng.uniform(T0 + 8 * DAY, T0 + days * DAY, n))
    ents = rng.integers(0, entities, n)
    leads = rng.uniform(1 * HOUR, 5 * DAY, n)
    pre = rng.random(n) < 0.4
    return [Failure(float(t), gpu(int(e)), Scope.GPU, gpu(int(e)).split(":")[0], "M1_hbm",
                    float(t - lead) if p else None)
            for t, e, lead, p in zip(times, ents, leads, pre, strict=True)]


def test_a_perfect_oracle_scores_one_on_precursor_bearing_failures() -> None:
    failures = _fleet(np.random.default_rng(1), 300, 4096, 365)
    alerts = [AlertRecord(f.onset, f.entity, f.scope, f.node, 2)
              for f in failures if f.onset is not None]
    s = view_scores(match(alerts, failures, WATCH), failures, node_days=512 * 365)
    assert s["precision"] == 1.0 and s["recall_precursor"] == 1.0 and s["f1"] == 1.0
    assert s["false_alarms"] == 0
    assert s["recall_all"] == pytest.approx(sum(f.precursor for f in failures) / len(failures))


def test_random_alerts_score_the_base_rate() -> None:
    rng = np.random.default_rng(7)
    entities, days, rate = 1000, 365.0, 2.0  # failures per entity-year
    failures = _fleet(rng, int(entities * rate), entities, days)
    n = 5000
    times = rng.uniform(T0, T0 + days * DAY, n)
    ents = rng.integers(0, entities, n)
    alerts = sorted((AlertRecord(float(t), gpu(int(e)), Scope.GPU, gpu(int(e)).split(":")[0], 1)
                     for t, e in zip(times, ents, strict=True)), key=lambda a: a.time)
    m = match(alerts, failures, WATCH)
    # A random alert is a hit when its entity fails within [5 min, 7 d] after it: the chance
    # of that under a uniform failure rate (edges of the run ignored, failures start at day 8).
    window = (7 * DAY - 5 * MINUTE) / (365.25 * DAY)
    base = 1 - np.exp(-rate * window * days / (days - 8))
    assert m.true_alerts / m.alerts == pytest.approx(base, rel=0.25)
    s = view_scores(m, failures, entities / 8 * days)
    assert s["precision"] == pytest.approx(base, rel=0.3)


def test_random_scores_give_the_prevalence_as_pr_auc() -> None:
    rng = np.random.default_rng(3)
    labels = rng.random(400_000) < 0.01
    ap, _, _ = average_precision(rng.random(400_000), labels)
    assert ap == pytest.approx(labels.mean(), rel=0.1)
    # A constant score ties everything: exactly the prevalence.
    ap_const, _, _ = average_precision(np.zeros(1000), np.arange(1000) < 10)
    assert ap_const == pytest.approx(0.01)
    ap_perfect, _, _ = average_precision(np.r_[np.ones(10), np.zeros(990)], np.arange(1000) < 10)
    assert ap_perfect == 1.0


def test_trap_shares_and_delay_stats() -> None:
    from models.evaluation.events import Trap

    traps = [Trap("sbe_carrier", gpu(0), Scope.GPU, "n0", T0),
             Trap("sbe_carrier", gpu(1), Scope.GPU, "n0", T0),
             Trap("nvlink_blip", "n0:gpu0:nvlink0", Scope.NVLINK, "n0", T0)]
    assert trap_shares(traps, [True, False, False]) == {
        "nvlink_blip": {"n": 1, "alerted": 0, "share": 0.0},
        "sbe_carrier": {"n": 2, "alerted": 1, "share": 0.5}}
    failures = [Failure(T0, gpu(0), Scope.GPU, "n0", "M2_gpu_hard"),
                Failure(T0, gpu(1), Scope.GPU, "n0", "M2_gpu_hard"),
                Failure(T0, gpu(2), Scope.GPU, "n0", "M1_hbm", T0 - DAY)]  # not abrupt
    d = delay_stats(failures, {0: 30.0, 2: 5.0})
    assert d["failures"] == 2 and d["detected"] == 1 and d["median_s"] == 30.0
    assert d["within_60s"] == 0.5


def test_critical_false_alarms_per_family_and_pages_on_combined_signals() -> None:
    """Issue 28: the critical view's false alarms per family (every family present, so a
    seed without any counts as 0 in the mean), and the pages whose strongest signal alone
    would not have paged."""
    t = T0 + 10 * DAY
    failures = [Failure(t, gpu(0), Scope.GPU, "n0", "M1_hbm", t - DAY)]
    link = "n1:gpu0:nvlink0"
    alerts = [
        AlertRecord(t - 30 * MINUTE, gpu(0), Scope.GPU, "n0", 3, 2, "dbe", 1.0),  # a hit
        AlertRecord(t - 5 * HOUR, gpu(1), Scope.GPU, "n0", 3, 2, "sbe_growth", 0.65),
        AlertRecord(t - 3 * DAY, link, Scope.NVLINK, "n1", 3, 0, "nvlink_down", 1.0),
        AlertRecord(t - 4 * DAY, gpu(2), Scope.GPU, "n0", 3, 1, "xid"),  # strength unknown
        AlertRecord(t - 2 * DAY, gpu(3), Scope.GPU, "n0", 2, 0, "sbe_growth", 0.65),  # warning
    ]
    s = view_scores(match(alerts, failures, default_views()[2]), failures, node_days=500.0)
    assert s["fa_per_1000_node_days"] == 6.0
    assert s["fa_per_1000_node_days_by_family"] == {"gpu": 4.0, "nvlink": 2.0, "ib_port": 0.0}
    got = combined_pages(alerts, enter=0.9)
    assert got == {"pages": 4, "judged": 3, "combined": 1, "by_rule": {"sbe_growth": 1}}


def test_the_page_threshold_is_the_alert_policys() -> None:
    assert EvalConfig().page_enter == AlertPolicy().enter[2]
