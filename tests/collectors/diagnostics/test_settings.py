from __future__ import annotations

from typing import Any

import pytest

from collectors.diagnostics.settings import DiagnosticsSettings, SuiteSpec, load


def test_the_defaults_are_valid_and_gate_every_class() -> None:
    s = DiagnosticsSettings()
    assert [x.name for x in s.gate_for("memory")] == ["dcgm_r3"]
    assert [x.name for x in s.gate_for("nvlink")] == ["nccl_allreduce", "nvbandwidth"]
    assert [x.name for x in s.gate_for("xid_79")] == ["dcgm_r2"]  # not listed: default
    assert s.suites["nccl_allreduce"].argv(8)[-2:] == ["-g", "8"]
    assert {x.parser for x in s.suites.values()} == {"dcgm_diag", "nccl_tests", "nvbandwidth",
                                                     "gpu_burn"}


def test_a_suite_is_named_by_its_key() -> None:
    s = load({"suites": {"quick": {"command": ["dcgmi", "diag", "-r", "1", "-j"],
                                   "parser": "dcgm_diag", "timeout_s": 120}},
              "gate": {"default": ["quick"]}})
    assert s.suites["quick"].name == "quick"
    assert s.gate_for("memory")[0].name == "quick"


def test_literal_braces_and_the_gpus_placeholder() -> None:
    spec = SuiteSpec(name="x", command=["tool", "--json={{}}", "-g", "{gpus}"],
                     parser="nccl_tests", timeout_s=10)
    assert spec.argv(4) == ["tool", "--json={}", "-g", "4"]


def _suite(**over: Any) -> dict[str, Any]:
    return {"command": ["all_reduce_perf", "-g", "{gpus}"], "parser": "nccl_tests",
            "timeout_s": 60, **over}


@pytest.mark.parametrize(("data", "message"), [
    ({"suites": {"Bad-Name": _suite()}, "gate": {"default": ["Bad-Name"]}},
     "suite name 'Bad-Name' is not a safe name"),
    ({"suites": {"n": _suite(parser="nccl")}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.parser: Value error, unknown diagnostics parser 'nccl' (known: "
     "dcgm_diag, gpu_burn, nccl_tests, nvbandwidth)"),
    ({"suites": {"n": _suite(command=["x", "{node}"])}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.command: Value error, word 1: unknown placeholder {node} "
     "(known: {gpus})"),
    ({"suites": {"n": _suite(command=["x", "{gpus"])}, "gate": {"default": ["n"]}},
     "word 1 has an unmatched brace"),
    ({"suites": {"n": _suite(command=[])}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.command: List should have at least 1 item"),
    ({"suites": {"n": _suite(timeout_s=0)}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.timeout_s: Input should be greater than 0"),
    ({"suites": {"n": _suite(tolerance=1.5)}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.tolerance: Input should be less than 1"),
    ({"suites": {"n": _suite(expected={"H100": {"busbw": 300}})}, "gate": {"default": ["n"]}},
     "expected.H100.busbw: not a figure the nccl_tests parser reports (avg_busbw_gbps, "
     "busbw_gbps)"),
    ({"suites": {"n": _suite(expected={"H100": {"busbw_gbps": -1}})},
      "gate": {"default": ["n"]}}, "H100.busbw_gbps: the expected minimum must be"),
    ({"suites": {"n": _suite(expected={" ": {"busbw_gbps": 1}})}, "gate": {"default": ["n"]}},
     "a GPU model key is empty"),
    ({"suites": {"d": _suite(parser="dcgm_diag", expected={"H100": {"memory": 1}})},
      "gate": {"default": ["d"]}}, "none: it judges its own tests"),
    ({"suites": {"n": _suite(name="m")}, "gate": {"default": ["n"]}},
     "suites.n: its name 'm' differs from its key"),
    ({"suites": {"n": _suite(shell=True)}, "gate": {"default": ["n"]}},
     "diagnostics.suites.n.shell: Extra inputs are not permitted"),
    ({"suites": {"n": _suite()}, "gate": {"memory": ["n"]}}, "gate: no 'default' entry"),
    ({"suites": {"n": _suite()}, "gate": {"default": ["n"], "nvlink": ["nccl"]}},
     "gate.nvlink: unknown suite 'nccl' (known: n)"),
    ({"suites": {"n": _suite()}, "gate": {"default": []}}, "gate.default: no suite"),
    ({"suites": {"n": _suite()}, "gate": {"default": ["n"], "NVLink": ["n"]}},
     "gate failure class 'NVLink' is not a safe name"),
    ({"suites": {"n": _suite()}}, "gate.memory: unknown suite 'dcgm_r3'"),
])
def test_errors_name_the_field_and_the_reason(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="invalid diagnostics settings") as info:
        load(data)
    assert message in str(info.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ValueError) as info:
        load({"suites": {"n": _suite(parser="x", timeout_s=-1)}, "gate": {"default": ["n"]}})
    lines = str(info.value).splitlines()
    assert len(lines) == 3 and all(ln.startswith("  diagnostics.suites.n.") for ln in lines[1:])


def test_nvbandwidth_accepts_any_testcase_name_as_a_figure() -> None:
    spec = SuiteSpec(name="n", command=["nvbandwidth"], parser="nvbandwidth", timeout_s=60,
                     expected={"H100": {"device_to_device_bidirectional_memcpy_read_ce": 700}})
    assert spec.expected["H100"]
    with pytest.raises(ValueError, match="a check name of lowercase"):
        SuiteSpec(name="n", command=["nvbandwidth"], parser="nvbandwidth", timeout_s=60,
                  expected={"H100": {"Host To Device": 50}})
