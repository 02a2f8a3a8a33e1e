from __future__ import annotations

from collectors.diagnostics.result import Check, Status
from collectors.diagnostics.verdict import expected_figure, judge
from tests.collectors.diagnostics.helpers import with_expected

EXPECTED = {"H100": {"busbw_gbps": 350.0, "avg_busbw_gbps": 100.0},
            "H100 NVL": {"busbw_gbps": 150.0}}
BUSBW = Check("busbw_gbps", Status.PASS, figure=300.0, unit="GB/s")


def test_the_most_specific_model_wins_per_check() -> None:
    assert expected_figure(EXPECTED, "NVIDIA H100 NVL", "busbw_gbps") == ("H100 NVL", 150.0)
    # a check the specific key leaves out comes from the general one
    assert expected_figure(EXPECTED, "NVIDIA H100 NVL", "avg_busbw_gbps") == ("H100", 100.0)
    assert expected_figure(EXPECTED, "nvidia h100 80gb hbm3", "busbw_gbps") == ("H100", 350.0)
    assert expected_figure(EXPECTED, "NVIDIA A100-SXM4-80GB", "busbw_gbps") is None
    assert expected_figure(EXPECTED, "", "busbw_gbps") is None


def test_below_the_floor_fails_at_the_floor_passes() -> None:
    spec = with_expected("nccl_allreduce", {"H100": {"busbw_gbps": 400.0}}, tolerance=0.1)
    (low,) = judge([BUSBW], spec, "NVIDIA H100 80GB HBM3")
    assert low.status is Status.FAIL and low.expected == 400.0
    assert "below the expected 400 GB/s" in low.detail and "360 GB/s" in low.detail
    (edge,) = judge([Check("busbw_gbps", Status.PASS, figure=360.0)], spec, "H100")
    assert edge.status is Status.PASS and edge.expected == 400.0


def test_without_an_expected_figure_the_tool_decides_and_it_says_so() -> None:
    spec = with_expected("nccl_allreduce", {"H100": {"busbw_gbps": 400.0}})
    (c,) = judge([BUSBW], spec, "NVIDIA A100-SXM4-80GB")
    assert c.status is Status.PASS and c.expected is None
    assert c.detail == "no expected figure for NVIDIA A100-SXM4-80GB"
    (u,) = judge([BUSBW], spec, "")
    assert u.detail == "no expected figure for an unknown GPU model"


def test_a_failed_check_stays_failed_and_unlisted_checks_are_left_alone() -> None:
    spec = with_expected("nccl_allreduce", {"H100": {"busbw_gbps": 100.0}})
    failed = Check("busbw_gbps", Status.FAIL, figure=500.0, detail="tool said so")
    other = Check("data_integrity", Status.PASS, figure=0.0)
    out = judge([failed, other], spec, "H100", frozenset({"busbw_gbps"}))
    assert out[0].status is Status.FAIL and out[0].detail == "tool said so"
    assert out[1] == other
