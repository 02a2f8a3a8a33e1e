"""The share of the downtime in observed classes (models/evaluation/coverage.py) and how the
node-wide failures' alerts are matched."""

from __future__ import annotations

import pytest

from collectors.catalog import Scope
from models.evaluation.coverage import downtime_coverage, mode_detection
from models.evaluation.events import AlertRecord, Failure
from models.evaluation.matching import default_views, match
from models.simulator.fault_log import CLASSES, share_of
from models.simulator.modes import Mode

T = 1_700_000_000.0


def _fail(mode: str, entity: str, scope: Scope, t: float = T) -> Failure:
    return Failure(t, entity, scope, entity.split(":")[0], mode)


def test_the_table_is_the_issues() -> None:
    assert sum(c.share for c in CLASSES) == pytest.approx(99.74)
    assert share_of(Mode.M8_PSU) == pytest.approx(19.2)
    assert share_of(Mode.M9_FAN) == pytest.approx(12.1)


def test_a_class_counts_when_a_rule_fires_on_half_of_its_failures() -> None:
    fails = [_fail("M8_psu", "n1:psu0", Scope.PSU), _fail("M8_psu", "n2:psu1", Scope.PSU),
             _fail("M9_fan", "n1:fan0", Scope.FAN), _fail("M9_fan", "n2:fan0", Scope.FAN),
             _fail("M9_fan", "n3:fan0", Scope.FAN)]
    seen = mode_detection(fails, predicted={0}, detected={2})
    assert seen["M8_psu"] == {"failures": 2, "seen": 1, "share": 0.5}
    assert seen["M9_fan"]["share"] == pytest.approx(1 / 3)
    cov = downtime_coverage(seen)
    total = sum(c.share for c in CLASSES)
    assert cov["observed_share"] == pytest.approx(19.2 / total)  # fans under half: not observed
    assert cov["weighted_share"] == pytest.approx((19.2 * 0.5 + 12.1 / 3) / total)
    assert cov["classes"]["fan speed critical"]["observed"] == 0.0
    assert cov["classes"]["GPU P2P bandwidth low"]["mode"] == "M14_p2p_bw"  # an active test
    assert cov["classes"]["GPU P2P bandwidth low"]["observed"] == 0.0  # finds it, no rule
    assert downtime_coverage({})["observed_share"] == 0.0


def test_a_redundancy_alert_after_a_supply_failure_is_no_false_alarm() -> None:
    fails = [_fail("M8_psu", "n1:psu0", Scope.PSU)]
    alerts = [AlertRecord(T + 60, "n1", Scope.NODE, "n1", 2),  # psu_redundancy_lost
              AlertRecord(T + 60, "n2", Scope.NODE, "n2", 2),  # another node: false
              AlertRecord(T - 3600, "n1:psu0", Scope.PSU, "n1", 1)]  # the supply itself
    watch = next(v for v in default_views() if v.name == "watch")
    m = match(alerts, fails, watch)
    assert m.first_alert == {0: T - 3600}
    assert [a.entity for a in m.false_alarms] == ["n2"] and m.post_failure == 1
