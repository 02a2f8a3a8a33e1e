from __future__ import annotations

import json
import math

import pytest

from collectors.diagnostics.result import (
    Check,
    Status,
    build,
    describe,
    failing,
    from_dict,
    to_dict,
)


def test_any_failing_check_fails_even_with_an_error() -> None:
    r = build("s", [Check("a", Status.PASS), Check("b", Status.FAIL, gpu=3)], error="cut short")
    assert r.status is Status.FAIL and r.error == "cut short"
    assert failing(r) == (Check("b", Status.FAIL, gpu=3),)


def test_an_error_without_a_failure_is_an_error() -> None:
    assert build("s", [Check("a", Status.PASS)], error="killed").status is Status.ERROR
    r = build("s", [Check("a", Status.PASS), Check("b", Status.ERROR, detail="never ran")])
    assert r.status is Status.ERROR and "b: error: never ran" in r.error


def test_no_check_at_all_is_an_error_not_a_pass() -> None:
    r = build("s", [])
    assert r.status is Status.ERROR and r.error == "the output holds no result"


def test_all_passing_passes() -> None:
    r = build("s", [Check("a", Status.PASS, gpu=0)], {"driver": "570.1"}, gpu_model="H100")
    assert r.status is Status.PASS and r.error == "" and failing(r) == ()


def test_describe_names_the_check_gpu_and_figures() -> None:
    c = Check("busbw_gbps", Status.FAIL, figure=251.0, expected=400.0, unit="GB/s",
              detail="at 8 GB")
    assert describe(c) == "busbw_gbps: fail 251 GB/s (expected 400): at 8 GB"
    assert describe(Check("memory", Status.PASS, gpu=2)) == "memory on GPU 2: pass"


def test_json_round_trip() -> None:
    r = build("nccl", [Check("busbw_gbps", Status.FAIL, None, 251.5, 400.0, "GB/s", "x"),
                       Check("memory", Status.PASS, 7)],
              {"nccl": "2.27.3"}, error="", gpu_model="NVIDIA H100 80GB HBM3")
    data = json.loads(json.dumps(to_dict(r)))
    assert from_dict(data) == r


def test_to_dict_drops_non_finite_figures() -> None:
    r = build("s", [Check("a", Status.PASS, figure=math.nan)])
    assert to_dict(r)["checks"][0]["figure"] is None


@pytest.mark.parametrize(("data", "why"), [
    ({"status": "pass", "checks": []}, "suite"),
    ({"suite": "s", "status": "maybe", "checks": []}, "maybe"),
    ({"suite": "s", "status": "pass", "checks": {}}, "checks"),
    ({"suite": "s", "status": "pass", "checks": [{"name": "a", "status": "pass",
                                                  "figure": "1"}]}, "figure"),
    ({"suite": "s", "status": "pass", "checks": [{"name": "a", "status": "pass",
                                                  "gpu": True}]}, "gpu"),
    ({"suite": "s", "status": "pass", "checks": [], "versions": {"a": 1}}, "versions"),
])
def test_from_dict_refuses_what_to_dict_never_writes(data: dict[str, object],
                                                      why: str) -> None:
    with pytest.raises(ValueError, match=why):
        from_dict(data)
