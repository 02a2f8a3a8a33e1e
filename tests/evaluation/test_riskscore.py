"""PR-AUC samples: (entity, day) scores from the daily max recorder, labels from failures."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.catalog import Scope
from models.evaluation.events import Failure
from models.evaluation.riskscore import DAY, DailyMax, build_samples

T0 = 1_735_689_600.0
KEYS = {"gpu": ["n0:gpu0", "n0:gpu1", "n0:gpu2"], "nvlink": ["n0:gpu0:nvlink0", "n0:gpu1:nvlink0"],
        "ib_port": ["n0:mlx5_0:1"]}


def _record(risks: dict[int, dict[str, list[float]]]) -> DailyMax:
    rec = DailyMax(T0)
    for day in range(4):
        for hour in range(24):
            r = risks.get(day, {})
            rec.update(T0 + day * DAY + hour * 3600, {
                fam: np.array(r.get(fam, [0.0] * len(KEYS[fam])), np.float32) for fam in KEYS})
    rec.flush()
    return rec


def test_positive_is_the_day_before_a_failure_and_failure_days_are_left_out() -> None:
    rec = _record({1: {"gpu": [0.0, 0.6, 0.0]}, 2: {"gpu": [0.0, 1.0, 0.3]}})
    fail = [Failure(T0 + 2.5 * DAY, "n0:gpu1", Scope.GPU, "n0", "M1_hbm", T0 + DAY)]
    s = build_samples(rec, KEYS, [0, 1], fail)
    assert s.pos_scores == [pytest.approx(0.6)] and s.pos_modes == ["M1_hbm"]
    # 4 days x (3 GPUs + 2 links + 1 port) = 24 samples; gpu1 and its link on days 1
    # (positive), 2 and 3 (failure day and grace) are not negatives.
    negatives = sum(len(x) for x in s.neg_scores) + s.neg_zero
    assert negatives == 24 - 6
    ap, _, _, prevalence = s.ap()
    assert ap == 1.0 and prevalence == pytest.approx(1 / 19)


def test_link_risk_counts_for_its_gpu() -> None:
    rec = _record({1: {"nvlink": [0.0, 0.8]}})
    fail = [Failure(T0 + 2.5 * DAY, "n0:gpu1", Scope.GPU, "n0", "M2_gpu_hard", None)]
    s = build_samples(rec, KEYS, [0, 1], fail)
    assert s.pos_scores == [pytest.approx(0.8)]
    assert s.ap(precursor_only=True)[0] is None  # no precursor-bearing positive
    assert s.ap(mode="M2_gpu_hard")[0] == 1.0


def test_recorder_keeps_only_what_fired() -> None:
    rec = _record({0: {"gpu": [0.0, 0.2, 0.0]}})
    assert sorted(rec.days["gpu"]) == [0, 1, 2, 3]
    assert rec.days["gpu"][0].slots.tolist() == [1] and rec.days["gpu"][1].n == 3
    assert len(rec.days["gpu"][1].slots) == 0
