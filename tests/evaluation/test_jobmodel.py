"""The Young/Daly job model (docs/evaluation.md) and the seed aggregation."""

from __future__ import annotations

import math

import pytest

from collectors.catalog import Scope
from models.evaluation.aggregate import combine, t_interval
from models.evaluation.events import AlertRecord, Failure
from models.evaluation.jobmodel import JobModel, operational

T = 1_735_689_600.0 + 30 * 86400


def _failures(n: int) -> list[Failure]:
    return [Failure(T + i * 3600, f"n{i}:gpu0", Scope.GPU, f"n{i}", "M1_hbm", T - 86400)
            for i in range(n)]


def test_young_daly_interval_and_lost_work() -> None:
    m = JobModel(mttf_h=7.9)  # 1,024 GPUs, MTTF 7.9 h (Kokolis et al., HPCA 2025), δ = 36 s
    out = operational(m, [], _failures(3), gpu_hours=1e6)
    assert out["checkpoint_interval_h"] == pytest.approx(math.sqrt(2 * 0.01 * 7.9))  # ~24 min
    assert out["lost_gpu_h_per_failure"] == pytest.approx(1024 * (0.397 / 2 + 10 / 60), rel=0.01)
    assert out["avoided"] == 0 and out["net_share"] == 0.0


def test_timely_alerts_save_work_false_alarms_cost_it() -> None:
    fails = _failures(4)
    alerts = [AlertRecord(f.time - 2 * 3600, f.entity, f.scope, f.node, 2) for f in fails[:2]]
    alerts.append(AlertRecord(fails[2].time - 600, fails[2].entity, Scope.GPU, fails[2].node, 3))
    alerts.append(AlertRecord(T - 20 * 86400, "n9:gpu0", Scope.GPU, "n9", 2))  # false alarm
    out = operational(JobModel(mttf_h=10.0), alerts, fails, gpu_hours=1e6)
    assert out["avoided"] == 2  # the 10-min call is too late for a checkpoint and drain
    assert out["false_alarms"] == 1
    assert out["false_alarm_cost_gpu_h"] == pytest.approx(1024 * 2 / 60 + 8 * 1.0)
    saved = out["saved_gpu_h"]
    assert out["net_share"] == pytest.approx((saved - out["false_alarm_cost_gpu_h"])
                                             / out["baseline_lost_gpu_h"])
    assert 0 < out["net_share"] < 0.5


def test_seed_intervals() -> None:
    ci = t_interval([0.5, 0.6, 0.7])
    assert ci["mean"] == pytest.approx(0.6) and ci["n"] == 3
    assert ci["hi"] - ci["mean"] == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)
    both = combine([{"a": {"p": 0.5, "q": None}, "name": "x"}, {"a": {"p": 0.7, "q": 2}}])
    assert both["a"]["p"]["mean"] == pytest.approx(0.6) and both["a"]["q"]["n"] == 1
    assert both["name"] == "x"


def test_share_of_precursor_bearing_failures_by_hand() -> None:
    # Three failures with a precursor, one abrupt; timely alerts on two precursor failures and
    # on the abrupt one, and one false alarm. MTTF 10 h: τ = sqrt(2 x 0.01 h x 10 h).
    fails = [*_failures(3), Failure(T + 5 * 3600, "n5:gpu0", Scope.GPU, "n5", "M2_gpu_hard")]
    alerts = [AlertRecord(f.time - 2 * 3600, f.entity, f.scope, f.node, 2)
              for f in (fails[0], fails[1], fails[3])]
    alerts.append(AlertRecord(T - 20 * 86400, "n9:gpu0", Scope.GPU, "n9", 2))  # false alarm
    out = operational(JobModel(mttf_h=10.0), alerts, fails, gpu_hours=1e6)
    tau = math.sqrt(0.2)
    lost = 1024 * (tau / 2 + 10 / 60)  # per failure: half an interval plus the restart
    saved = 1024 * (tau / 2 + 10 / 60 - 2 / 60)  # less the planned restart
    fa = 1024 * 2 / 60 + 8 * 1.0
    assert out["precursor_failures"] == 3 and out["avoided_precursor"] == 2
    assert out["avoided"] == 3
    assert out["precursor_lost_gpu_h"] == pytest.approx(3 * lost)
    assert out["net_share_precursor"] == pytest.approx((2 * saved - fa) / (3 * lost))
    assert out["net_share"] == pytest.approx((3 * saved - fa) / (4 * lost))
    # By the numbers: lost 399.6, saved 365.5, FA 42.1 GPU-h -> 0.574 and 0.659.
    assert out["net_share_precursor"] == pytest.approx(0.5746, abs=1e-3)


def test_share_of_precursor_bearing_failures_without_any() -> None:
    abrupt = [Failure(T, "n1:gpu0", Scope.GPU, "n1", "M2_gpu_hard")]
    out = operational(JobModel(mttf_h=10.0), [], abrupt, gpu_hours=1e6)
    assert out["precursor_failures"] == 0 and out["net_share_precursor"] is None
