"""The predicted failure window from the model's cumulative horizon heads."""

from __future__ import annotations

import math

import pytest

from models.predictor.window import PredictedWindow, predicted_window


@pytest.mark.parametrize(("heads", "want"), [
    # the first horizon reaching 0.5, after the one before it
    ({"M1_hbm@1h": 0.05, "M1_hbm@24h": 0.3, "M1_hbm@168h": 0.8},
     PredictedWindow("M1_hbm", 24, 168, 0.8)),
    ({"M1_hbm@1h": 0.7, "M1_hbm@24h": 0.9}, PredictedWindow("M1_hbm", 0, 1, 0.7)),
    # calibrated one by one: a longer horizon read lower is lifted to the shorter one's
    ({"M5_thermal@1h": 0.2, "M5_thermal@24h": 0.6, "M5_thermal@168h": 0.55},
     PredictedWindow("M5_thermal", 1, 24, 0.6)),
    # of two modes the earlier window wins, at equal windows the likelier
    ({"M1_hbm@24h": 0.9, "M1_hbm@168h": 0.95, "M4_ib_link@1h": 0.1, "M4_ib_link@24h": 0.55},
     PredictedWindow("M1_hbm", 0, 24, 0.9)),
    ({"M1_hbm@1h": 0.1, "M1_hbm@24h": 0.6, "M2_gpu_hard@1h": 0.2, "M2_gpu_hard@24h": 0.7},
     PredictedWindow("M2_gpu_hard", 1, 24, 0.7)),
])
def test_the_window_is_the_first_likely_horizon(heads: dict[str, float],
                                                 want: PredictedWindow) -> None:
    assert predicted_window(heads) == want


def test_no_window_below_likely_or_without_usable_heads() -> None:
    assert predicted_window({"M1_hbm@1h": 0.1, "M1_hbm@168h": 0.49}) is None
    assert predicted_window({"M1_hbm@24h": math.nan, "bogus": 0.9, "M1_hbm@soonh": 0.9}) is None
    assert predicted_window({}) is None


def test_the_window_reads_as_a_sentence() -> None:
    assert PredictedWindow("M1_hbm", 24, 168, 0.8).text() == \
        "HBM failure likely in 24 h to 7 days (80%)"
    assert PredictedWindow("M4_ib_link", 0, 1, 0.62).text() == \
        "InfiniBand link failure likely within 1 h (62%)"
