from __future__ import annotations

import pytest

from collectors.diagnostics.nccl import parse
from collectors.diagnostics.result import Status, failing
from tests.collectors.diagnostics.helpers import named, run, with_expected
from tests.collectors.own_captures import (
    NCCL_ERROR,
    NCCL_KILLED,
    NCCL_KILLED_WRONG,
    NCCL_MPI_ERROR,
    NCCL_PASS,
    NCCL_SLOW,
    NCCL_WRONG,
    read,
)

H100 = "NVIDIA H100 80GB HBM3"


def test_a_healthy_run_at_its_expected_bandwidth() -> None:
    r = run(NCCL_PASS, "nccl_allreduce")
    assert r.status is Status.PASS and r.gpu_model == H100  # read from the device lines
    assert r.versions == {"nccl_tests": "2.17.6", "nccl": "2.27.3"}
    (peak,) = named(r, "busbw_gbps")
    assert peak.figure == 477.67 and peak.expected == 400.0 and peak.detail == "at 8 GB"
    (avg,) = named(r, "avg_busbw_gbps")
    assert avg.figure == pytest.approx(163.986) and "no expected figure" in avg.detail
    assert named(r, "data_integrity")[0].status is Status.PASS


def test_low_bus_bandwidth_fails_against_the_models_figure() -> None:
    r = run(NCCL_SLOW, "nccl_allreduce")
    assert r.status is Status.FAIL
    (bad,) = failing(r)
    assert bad.name == "busbw_gbps" and bad.figure == 250.91 and bad.expected == 400.0
    # the same output on a model with no figure passes, and says why
    spec = with_expected("nccl_allreduce", {"A100": {"busbw_gbps": 200.0}})
    r = parse(read(NCCL_SLOW), 0, spec, "")
    assert r.status is Status.PASS
    assert named(r, "busbw_gbps")[0].detail == "at 8 GB; no expected figure for " + H100


def test_wrong_values_are_data_corruption() -> None:
    r = run(NCCL_WRONG, "nccl_allreduce", exit_code=1)
    assert r.status is Status.FAIL and r.versions == {}  # older releases print no version
    (bad,) = failing(r)
    assert bad.name == "data_integrity" and bad.figure == 30.0
    assert bad.detail == "wrong values (data corruption) at 16 MB, 512 MB"
    assert named(r, "busbw_gbps")[0].figure == 470.68


def test_killed_at_the_time_limit_is_an_error() -> None:
    r = run(NCCL_KILLED, "nccl_allreduce", exit_code=124)
    assert r.status is Status.ERROR
    assert r.error == ("the output stops after the 256 MB row, with no 'Avg bus bandwidth' "
                       "line (timed out)")
    assert not named(r, "busbw_gbps")  # a partial run's last size is not the peak


def test_killed_after_wrong_values_is_a_failure() -> None:
    r = run(NCCL_KILLED_WRONG, "nccl_allreduce", exit_code=137)
    assert r.status is Status.FAIL and "killed (SIGKILL)" in r.error
    assert failing(r)[0].detail == "wrong values (data corruption) at 64 MB"


def test_nccl_and_launch_failures_are_errors() -> None:
    r = run(NCCL_ERROR, "nccl_allreduce", exit_code=3)
    assert r.status is Status.ERROR
    assert "Test NCCL failure common.cu:1279" in r.error and "uncorrectable ECC" in r.error
    r = run(NCCL_MPI_ERROR, "nccl_allreduce", exit_code=1)
    assert r.status is Status.ERROR
    assert r.error.startswith("the NCCL tests could not run: mpirun was unable to launch")


def test_min_bw_failed_by_the_tool_itself() -> None:
    text = read(NCCL_PASS).replace("# Avg bus bandwidth    : 163.986 ",
                                   "# Avg bus bandwidth    : 163.986 FAILED")
    r = run(text, "nccl_allreduce", exit_code=1)
    assert [c.name for c in failing(r)] == ["avg_busbw_gbps"]


def test_validation_off_prints_na_and_counts_no_wrong_values() -> None:
    text = "\n".join(ln[:-6] + "   N/A" if ln.startswith("  ") and ln.rstrip().endswith("0")
                     else ln for ln in read(NCCL_PASS).splitlines())
    r = run(text, "nccl_allreduce")
    assert r.status is Status.PASS and named(r, "busbw_gbps")[0].figure == 477.67


def test_a_clean_output_with_a_failing_exit_status_is_an_error() -> None:
    r = run(NCCL_PASS, "nccl_allreduce", exit_code=1)
    assert r.status is Status.ERROR and "exit status 1" in r.error
