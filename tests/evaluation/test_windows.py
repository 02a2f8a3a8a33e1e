"""Scoring failure windows (models/evaluation/windows.py): which alerts count as pre-failure,
their failure time, and coverage of raw, calibrated and constant windows."""

from __future__ import annotations

from collectors.catalog import Scope
from models.evaluation.events import AlertRecord, Failure
from models.evaluation.matching import HOUR, FailureIndex
from models.evaluation.windows import OVERALL, PreFailure, pooled, pre_failure, window_scores
from models.predictor.interval import GROWTH, Calibration, RawWindow

GPU = "n1:gpu0"


def raw(estimate_h: float) -> RawWindow:
    return RawWindow(GROWTH, "M1_hbm", estimate_h / 2, estimate_h * 2, estimate_h, 0.5)


def alert(t: float, *windows: RawWindow, entity: str = GPU) -> AlertRecord:
    return AlertRecord(t, entity, Scope.GPU, "n1", 1, windows=windows)


def test_pre_failure_alerts_and_their_failure_times() -> None:
    failures = [Failure(100 * HOUR, GPU, Scope.GPU, "n1", "M1_hbm"),
                Failure(120 * HOUR, GPU, Scope.GPU, "n1", "M1_hbm")]
    ix = FailureIndex(failures)
    alerts = [alert(90 * HOUR, raw(5)),  # 10 h before the first failure
              alert(99.99 * HOUR, raw(5)),  # under the minimum warning: the second is 20 h on
              alert(95 * HOUR),  # no window: not scored
              alert(90 * HOUR, raw(5), entity="n2:gpu0")]  # another GPU's: no failure
    pres = pre_failure(alerts, failures, ix)
    assert [round(p.actual_h, 2) for p in pres] == [10.0, 20.01]
    assert pooled([[p.to_dict() for p in pres]]) == pres


def test_coverage_raw_calibrated_and_constant() -> None:
    pres = [PreFailure((raw(5),), 15.0, "M1_hbm"),  # raw 2.5-10 misses; calibrated 5-20 holds
            PreFailure((raw(5),), 8.0, "M1_hbm"),  # both hold
            PreFailure((raw(5),), 30.0, "M1_hbm")]  # both miss
    cal = Calibration(0.8, growth={"*": (1.0, 4.0)}, constant={"*": (0.0, 48.0)})
    s = window_scores(pres, cal)["by_mode"]
    row = s["M1_hbm"]
    assert row["alerts"] == 3 and s[OVERALL]["alerts"] == 3
    assert row["raw"]["coverage"] == 1 / 3 and row["raw"]["median_width_h"] == 7.5
    assert row["calibrated"]["coverage"] == 2 / 3 and row["calibrated"]["median_width_h"] == 15
    assert row["constant"]["coverage"] == 1.0 and row["constant"]["median_width_h"] == 48
    assert row["fixed_1_24h"]["coverage"] == 2 / 3
    assert row["hidden"] == 0
    bare = window_scores(pres, None)
    assert bare["coverage"] is None and "calibrated" not in bare["by_mode"]["M1_hbm"]


def test_recalibrated_on_the_earlier_half_scored_on_the_later() -> None:
    """A fleet whose failures come four times later than its estimates: the earlier half of its
    own alerts teaches the factor, and the later half then falls inside at about the coverage
    stated."""
    import math
    import random

    from models.evaluation.windows import recalibrated, split_in_time

    rng = random.Random(5)

    def run(n: int) -> list[dict[str, object]]:
        out = []
        for _ in range(n):
            est = math.exp(rng.uniform(0, 4))
            out.append(PreFailure((raw(est),), est * 4 * math.exp(rng.gauss(0, 0.3)),
                                  "M1_hbm").to_dict())
        return out

    runs = [run(150), run(151)]
    earlier, later = split_in_time(runs)
    assert (len(earlier), len(later)) == (75 + 75, 75 + 76)
    assert later[0] == PreFailure.from_dict(runs[0][75])
    out = recalibrated(runs, 0.8)
    row = out["by_mode"][OVERALL]
    assert row["alerts"] == 151 and row["raw"]["coverage"] < 0.2
    assert 0.7 <= row["calibrated"]["coverage"] <= 0.92
    assert row["sources"] == {"growth": 151} and out["hidden"] == {}
    assert "earlier half" in out["fitted_on"]
