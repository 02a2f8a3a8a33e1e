"""A challenger that matches the active model's F1 and false alarms by alerting later is not
better: its median watch lead must be at least the active model's (issue 34, "Keep the lead")."""

from __future__ import annotations

from typing import Any

from service.learning.model_registry import ShadowRun
from service.learning.scoreboard import PromotionPolicy, judge

DAY = 86400.0
RUN = ShadowRun(1, 2, 0.0, 10 * DAY, None, 100 * DAY, "running")


def board(active_lead_h: float | None, challenger_lead_h: float | None) -> dict[str, Any]:
    def side(lead: float | None) -> dict[str, Any]:
        same = {"failures": 4, "f1_all": 0.8, "fa_per_1000_node_days": 1.0}
        return {"warning": same, "watch": same | {"lead": {"median_h": lead}}}

    return {"active:fused": side(active_lead_h), "challenger:fused": side(challenger_lead_h)}


def test_a_shorter_median_lead_is_refused() -> None:
    j = judge(board(24.0, 7.0), RUN, PromotionPolicy())
    assert not j.better
    assert j.reasons == ["shorter median lead (7.000 h against 24.000 h at watch, fused)"]


def test_an_equal_or_longer_lead_or_one_within_the_margin_passes() -> None:
    assert judge(board(24.0, 24.0), RUN, PromotionPolicy()).better
    assert judge(board(24.0, 30.0), RUN, PromotionPolicy()).better
    assert judge(board(24.0, 22.0), RUN, PromotionPolicy(lead_margin_h=3.0)).better
    assert not judge(board(24.0, 20.0), RUN, PromotionPolicy(lead_margin_h=3.0)).better


def test_no_lead_on_either_side_is_judged_by_the_rest() -> None:
    assert judge(board(None, None), RUN, PromotionPolicy()).better  # nothing detected before
    assert judge(board(None, 5.0), RUN, PromotionPolicy()).better
    refused = judge(board(5.0, None), RUN, PromotionPolicy())  # the active one had a lead
    assert not refused.better and "shorter median lead (n/a h" in refused.reasons[0]
