from __future__ import annotations

from collectors.diagnostics.nvbandwidth import requested
from collectors.diagnostics.result import Status, failing
from tests.collectors.diagnostics.helpers import SUITES, named, run
from tests.collectors.own_captures import (
    NVB_CUDA_ERROR,
    NVB_KILLED,
    NVB_PASS,
    NVB_SLOW_LINK,
    NVB_WAIVED,
    read,
)

D2D = "device_to_device_memcpy_read_ce"


def test_a_healthy_node_per_testcase_and_gpu() -> None:
    r = run(NVB_PASS, "nvbandwidth")
    assert r.status is Status.PASS and r.gpu_model == "NVIDIA H100 80GB HBM3"
    assert r.versions == {"nvbandwidth": "v0.8", "cuda": "12080", "driver": "570.133.20"}
    h2d = named(r, "host_to_device_memcpy_ce")
    assert [c.gpu for c in h2d] == list(range(8)) and all(c.expected == 40.0 for c in h2d)
    assert all(380 < (c.figure or 0) < 392 for c in named(r, D2D))


def test_one_slow_link_fails_both_of_its_gpus() -> None:
    r = run(NVB_SLOW_LINK, "nvbandwidth")
    assert r.status is Status.FAIL
    bad = failing(r)
    assert [(c.name, c.gpu) for c in bad] == [(D2D, 2), (D2D, 5)]
    assert all("GPU 2 <- GPU 5" in c.detail or "GPU 5 <- GPU 2" in c.detail for c in bad)
    assert all((c.figure or 0) < 120 for c in bad)


def test_cut_off_inside_a_matrix_is_an_error_for_that_testcase() -> None:
    r = run(NVB_KILLED, "nvbandwidth", exit_code=124)
    assert r.status is Status.ERROR
    (cut,) = [c for c in r.checks if c.status is Status.ERROR]
    assert cut.name == D2D and cut.detail == "cut off before its result (timed out)"
    assert len(named(r, "device_to_host_memcpy_ce")) == 8  # what finished still counts


def test_a_waived_testcase_the_suite_asked_for_is_an_error() -> None:
    r = run(NVB_WAIVED, "nvbandwidth")
    assert r.status is Status.ERROR
    (waived,) = named(r, D2D)
    assert waived.status is Status.ERROR and waived.detail.startswith("waived by nvbandwidth")


def test_a_cuda_failure_is_an_error() -> None:
    r = run(NVB_CUDA_ERROR, "nvbandwidth", exit_code=1)
    assert r.status is Status.ERROR
    assert r.error.startswith("nvbandwidth failed: [CUDA_ERROR_NO_DEVICE]")
    assert r.error.endswith(", exit status 1")


def test_a_testcase_error_line() -> None:
    text = read(NVB_PASS).replace("Running device_to_host_memcpy_ce.\n",
                                  "Running device_to_host_memcpy_ce.\nError: peer copy failed\n")
    r = run(text, "nvbandwidth", exit_code=0)
    (err,) = named(r, "device_to_host_memcpy_ce")
    assert err.status is Status.ERROR and err.detail == "nvbandwidth: peer copy failed"


def test_the_testcases_a_command_asks_for() -> None:
    assert requested(SUITES["nvbandwidth"].command) == [
        "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", D2D]
    assert requested(["nvbandwidth", "-t", "a_ce", "-b", "512", "--testcase", "b_sm"]) == [
        "a_ce", "b_sm"]
    assert requested(["nvbandwidth"]) == []
