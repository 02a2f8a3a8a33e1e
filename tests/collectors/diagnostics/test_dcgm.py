from __future__ import annotations

import json

from collectors.diagnostics.dcgm import check_name
from collectors.diagnostics.result import Status, failing
from tests.collectors.diagnostics.helpers import named, run
from tests.collectors.own_captures import (
    DCGM_HOSTENGINE_ERROR,
    DCGM_R2_PCIE_FAIL_TEXT,
    DCGM_R2_PCIE_FAIL_V3,
    DCGM_R3_CUT,
    DCGM_R3_MEMORY_FAIL,
    DCGM_R3_MEMORY_FAIL_TEXT_V3,
    DCGM_R3_PASS,
    DCGM_RUNTIME_ERROR,
    read,
)


def test_a_passing_level_3_run() -> None:
    r = run(DCGM_R3_PASS, "dcgm_r3")
    assert r.status is Status.PASS and r.error == ""
    assert r.versions == {"dcgm": "4.2.3", "driver": "570.133.20"}
    assert {c.name for c in r.checks} == {"software", "memory", "diagnostic", "pcie",
                                          "targeted_stress", "targeted_power",
                                          "memory_bandwidth"}
    assert sorted(c.gpu for c in named(r, "memory")) == [0, 1, 2, 3]


def test_a_memory_failure_names_the_gpu_and_dcgms_reason() -> None:
    r = run(DCGM_R3_MEMORY_FAIL, "dcgm_r3", exit_code=226)
    assert r.status is Status.FAIL
    (bad,) = failing(r)
    assert (bad.name, bad.gpu) == ("memory", 2)
    assert bad.detail.startswith("A memory mismatch was detected on GPU 2")
    (skipped,) = named(r, "diagnostic", gpu=2)
    assert skipped.status is Status.PASS and skipped.detail == "skipped by DCGM"


def test_a_document_cut_short_keeps_the_failure_it_already_shows() -> None:
    r = run(DCGM_R3_CUT, "dcgm_r3", exit_code=-9)
    assert r.status is Status.FAIL
    assert [(c.name, c.gpu) for c in failing(r)] == [("memory", 2)]
    assert "ends before the document closes (killed (SIGKILL))" in r.error


def test_a_passing_document_cut_short_is_an_error() -> None:
    text = read(DCGM_R3_PASS)
    r = run(text[: len(text) // 2], "dcgm_r3", exit_code=124)
    assert r.status is Status.ERROR and "timed out" in r.error and not r.checks


def test_the_3x_json_shape_with_its_banner_and_null_entries() -> None:
    r = run(DCGM_R2_PCIE_FAIL_V3, "dcgm_r2", exit_code=226)
    assert r.status is Status.FAIL
    assert r.versions == {"dcgm": "3.3.9", "driver": "550.90.07"}
    (bad,) = failing(r)
    assert (bad.name, bad.gpu) == ("pcie", 1) and "x8, expected x16" in bad.detail
    assert {c.name for c in r.checks} == {"software", "pcie", "memory", "memory_bandwidth"}


def test_the_4x_table_with_a_wrapped_warning() -> None:
    r = run(DCGM_R2_PCIE_FAIL_TEXT, "dcgm_r2", exit_code=226)
    assert r.status is Status.FAIL and r.versions["dcgm"] == "4.2.3"
    (bad,) = failing(r)
    assert (bad.name, bad.gpu) == ("pcie", 1)
    # the message is joined back across its 45-character rows, spaces kept
    assert bad.detail == ("GPU 1 PCIe link width was x8, expected x16 for GPU to Host "
                          "transfers. Check the seating and the riser.")
    assert [c.gpu for c in named(r, "pcie") if c.status is Status.PASS] == [0, 2, 3]


def test_the_3x_table_per_gpu_lists_and_all() -> None:
    r = run(DCGM_R3_MEMORY_FAIL_TEXT_V3, "dcgm_r3", exit_code=226)
    assert r.status is Status.FAIL and r.versions["driver"] == "550.90.07"
    (bad,) = failing(r)
    assert (bad.name, bad.gpu) == ("memory", 1)
    assert bad.detail.startswith("A memory mismatch was detected on GPU 1, but no error")
    assert named(r, "memory", gpu=0)[0].status is Status.PASS
    assert named(r, "targeted_power")[0].gpu is None  # "Pass - All"
    assert len(named(r, "software")) == 9


def test_a_table_cut_short_is_an_error() -> None:
    lines = read(DCGM_R3_MEMORY_FAIL_TEXT_V3).splitlines()
    cut = "\n".join(lines[:22])  # stops inside Integration, before memory's result
    r = run(cut, "dcgm_r3", exit_code=137)
    assert r.status is Status.ERROR and "the table ends before its last row" in r.error


def test_dcgm_errors_instead_of_a_result() -> None:
    r = run(DCGM_RUNTIME_ERROR, "dcgm_r3", exit_code=255)
    assert r.status is Status.ERROR and r.versions == {"dcgm": "4.2.3"}
    assert r.error.startswith("DCGM could not run the diagnostic: Error: Diagnostic could not "
                              "be run while DCGM is paused.")
    r = run(DCGM_HOSTENGINE_ERROR, "dcgm_r3", exit_code=1)
    assert r.status is Status.ERROR and "Unable to connect to host engine" in r.error
    r = run(json.dumps({"error": "nv-hostengine is not running"}), "dcgm_r3", exit_code=1)
    assert r.status is Status.ERROR and "nv-hostengine is not running" in r.error


def test_a_pass_with_a_failing_exit_status_is_not_a_pass() -> None:
    r = run(DCGM_R3_PASS, "dcgm_r3", exit_code=1)
    assert r.status is Status.ERROR and "exit status 1" in r.error


def test_everything_skipped_verifies_nothing() -> None:
    doc = json.loads(read(DCGM_R3_PASS))
    for cat in doc["DCGM Diagnostic"]["test_categories"]:
        for test in cat["tests"]:
            for res in test["results"]:
                res["status"] = "Skip"
    r = run(json.dumps(doc), "dcgm_r3")
    assert r.status is Status.ERROR and r.error == "DCGM skipped every test: nothing was verified"


def test_an_unknown_status_word_is_no_evidence_of_health() -> None:
    doc = json.loads(read(DCGM_R3_PASS))
    doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][0]["status"] = "Maybe"
    r = run(json.dumps(doc), "dcgm_r3")
    assert r.status is Status.ERROR and "unknown DCGM status 'Maybe'" in r.error


def test_iterations_are_all_read() -> None:
    one, bad = json.loads(read(DCGM_R3_PASS)), json.loads(read(DCGM_R3_MEMORY_FAIL))
    r = run(json.dumps({"iterations": [one, bad], "Overall Result": "Fail"}), "dcgm_r3", 226)
    assert r.status is Status.FAIL and [(c.name, c.gpu) for c in failing(r)] == [("memory", 2)]


def test_3x_display_names_become_4x_plugin_names() -> None:
    assert [check_name(n) for n in ("GPU Memory", "Targeted Stress", "PCIe", "Persistence Mode",
                                    "Memtest", "Some New Test!")] == [
        "memory", "targeted_stress", "pcie", "software", "memtest", "some_new_test"]
