"""The shared pieces every rule stands on: `fired`, `sustained`, `xid_risk`, fusion's caps,
and the in-memory fleet's agreement with the real window store's layout."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.findings import Finding, fired, sustained
from models.detectors.fusion import AGREE_CAP, COMBINED_CAP, fuse
from models.detectors.xid import (
    CRITICAL,
    CRITICAL_RISK,
    FATAL_RESET,
    FATAL_RESET_RISK,
    IGNORED,
    OTHER_RISK,
    xid_risk,
)
from service.stages.windows import WindowConfig
from tests.detectors import view


@pytest.mark.parametrize(("value", "risk"), [(2.0, 0.5), (2.5, 0.5), (1.999, 0.0),
                                             (math.nan, 0.0)])
def test_fired_at_or_above_the_threshold_only(value: float, risk: float) -> None:
    assert fired(np.array([value]), 2.0, 0.5)[0] == np.float32(risk)


T, F, N = True, False, None  # held, not held, no report


@pytest.mark.parametrize(("steps", "out"), [
    ([T, T, T, T], True),
    ([T, T, T, F], False),  # cleared at the end
    ([F, T, T, T], False),  # started too late
    ([N, T, T, T], True),  # one of the first two steps reported
    ([N, N, T, T], False),  # the first two did not: it may have begun inside the window
    ([T, N, T, N], True),  # half the window reported
    ([T, N, N, N], False),  # less than half
    ([], False),
])
def test_sustained(steps: list[bool | None], out: bool) -> None:
    holds = np.array([[s is True for s in steps]], bool).reshape(1, len(steps))
    seen = np.array([[s is not None for s in steps]], bool).reshape(1, len(steps))
    assert sustained(holds, seen)[0] == out


@pytest.mark.parametrize(("codes", "risk"), [(CRITICAL, CRITICAL_RISK),
                                             (FATAL_RESET, FATAL_RESET_RISK), (IGNORED, 0.0),
                                             ({1, 999}, OTHER_RISK)])
def test_xid_classes(codes: frozenset[int], risk: float) -> None:
    assert {xid_risk(c) for c in codes} == {risk}


def f(risk: float, hard: bool = False, source: str = "rule", rule: str = "r",
      evidence: str = "") -> Finding:
    return Finding(rule, Scope.GPU, np.array([risk], np.float32), np.array([0.0]), 0.0, "s",
                   hard=hard, source=source, evidence=evidence)


@pytest.mark.parametrize(("findings", "risk", "hard"), [
    ([f(0.5, rule="a"), f(0.5, rule="b")], 0.75, False),  # noisy-OR of independent rules
    ([f(0.5, rule="a", evidence="e"), f(0.5, rule="b", evidence="e")], 0.5, False),  # one piece
    ([f(0.5), f(0.5)], 0.5, False),  # one rule is one piece of evidence
    ([f(0.65, rule="a"), f(0.65, rule="b"), f(0.65, rule="c")], COMBINED_CAP, False),
    ([f(0.95, rule="a"), f(0.65, rule="b")], 0.95, False),  # the strongest piece stands
    ([f(0.88, rule="a"), f(0.65, rule="b")], 0.88, False),  # ... but is not lifted to a page
    ([f(0.8, source="model"), f(0.8)], AGREE_CAP, False),  # agreement caps below a page
    ([f(0.95, source="model"), f(0.1)], 0.95, False),  # one sure opinion stands alone
    # A model's modes are one opinion: two horizons' caps do not add up to a page.
    ([f(0.85, source="model", rule="m1"), f(0.85, source="model", rule="m2")], 0.85, False),
    ([f(1.0, hard=True)], 1.0, True),  # a full-certainty hard rule skips the wait
    ([f(0.99, hard=True)], 0.99, False),  # below certainty it waits like any other
    ([f(1.0, hard=True, rule="a", evidence="e"), f(0.3, rule="b", evidence="e")], 1.0, True),
])
def test_fusion(findings: list[Finding], risk: float, hard: bool) -> None:
    got = fuse(findings, {Scope.GPU: 1})[Scope.GPU]
    assert got.risk[0] == pytest.approx(risk) and bool(got.hard[0]) is hard


def test_the_evidence_key_defaults_to_the_rule_and_travels() -> None:
    plain, keyed = f(0.5, rule="a"), f(0.5, rule="b", evidence="e")
    assert plain.evidence == "a" and keyed.evidence == "e"
    assert keyed.fitted(3).evidence == "e"
    assert keyed.kept(np.array([0], np.intp)).evidence == "e"


def test_the_fake_fleet_has_the_stores_default_layout() -> None:
    """The rules choose raw or a tier from the layout; the fake must not drift from it."""
    c = WindowConfig()
    assert c.step_s == view.STEP_S and c.raw_length == view.RAW_LENGTH
    assert c.nvlink_raw_length == view.NVLINK_RAW_LENGTH
    for mine, theirs in ((view.TIERS, c.tiers), (view.NVLINK_TIERS, c.nvlink_tiers)):
        assert [(t.name, t.step_s, t.length) for t in mine] == \
            [(t.name, t.step_s, t.length) for t in theirs]


def test_the_fake_fleet_refuses_unknown_metrics() -> None:
    with pytest.raises(KeyError):
        view.FakeFleet().gpu.window("gpu_temperature", 3)
