from __future__ import annotations

from collectors.diagnostics.gpu_burn import parse
from collectors.diagnostics.result import Status, failing
from tests.collectors.diagnostics.helpers import named, run, with_expected
from tests.collectors.own_captures import (
    BURN_FAULTY,
    BURN_INIT_ERROR,
    BURN_KILLED_ERRORS,
    BURN_OK,
    read,
)


def test_every_gpu_ok() -> None:
    r = run(BURN_OK, "gpu_burn")
    assert r.status is Status.PASS and r.gpu_model == "NVIDIA H100 80GB HBM3"
    assert [c.gpu for c in named(r, "burn_errors")] == list(range(8))
    rates = named(r, "gflops")
    assert len(rates) == 8 and all(47000 < (c.figure or 0) < 48500 for c in rates)


def test_a_faulty_gpu() -> None:
    r = run(BURN_FAULTY, "gpu_burn")
    assert r.status is Status.FAIL
    (bad,) = failing(r)
    assert (bad.name, bad.gpu) == ("burn_errors", 3) and (bad.figure or 0) > 0


def test_killed_after_errors_fails_the_gpu() -> None:
    r = run(BURN_KILLED_ERRORS, "gpu_burn", exit_code=-15)
    assert r.status is Status.FAIL and "terminated (SIGTERM)" in r.error
    assert [(c.name, c.gpu) for c in failing(r)] == [("burn_errors", 5)]


def test_killed_without_errors_is_an_error() -> None:
    text = read(BURN_OK)
    r = run(text[: text.index("Killing processes")], "gpu_burn", exit_code=124)
    assert r.status is Status.ERROR and "stopped before its summary" in r.error


def test_a_gpu_whose_burn_died() -> None:
    text = read(BURN_OK).replace("errors: 0 - 0 - 0 ", "errors: 0 - 0  (DIED!) - 0 ", 1)
    r = run(text, "gpu_burn")
    assert [(c.gpu, c.detail) for c in failing(r)] == [(1, "the GPU's burn died")]


def test_it_could_not_start() -> None:
    r = run(BURN_INIT_ERROR, "gpu_burn", exit_code=123)
    assert r.status is Status.ERROR
    assert "Couldn't init a GPU test" in r.error and r.error.endswith(", exit status 123")


def test_a_slow_gpu_against_the_expected_rate() -> None:
    spec = with_expected("gpu_burn", {"H100": {"gflops": 60000.0}})
    r = parse(read(BURN_OK), 0, spec, "")
    assert r.status is Status.FAIL
    assert {c.name for c in failing(r)} == {"gflops"} and len(failing(r)) == 8
