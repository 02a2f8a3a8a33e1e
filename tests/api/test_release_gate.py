"""The return-to-service gate through the real app: a node drained for an ECC fault is not
released by `POST /v1/nodes/{node}/release` until its memory suite ran (here on the local site,
with a stand-in `dcgmi` printing our own capture of DCGM's JSON); the failing run shows in
`GET /v1/nodes/{node}/diagnostics` and raises a level-3 alert naming the failed check; an
operator may release it untested with a reason (`skip_gate`), which the audit keeps."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.settings import Settings
from tests.api.test_alerting_api import Svc, running

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "support" / "diag_standin.py"
FAILING = REPO / "tests" / "collectors" / "captures" / "diagnostics" / "dcgm" / \
    "diag-r3-memory-fail-v4.json"


@pytest.fixture
def svc(settings: Settings, tmp_path: Path) -> Iterator[Svc]:
    dcgmi = tmp_path / "dcgmi"
    dcgmi.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} --standin {FAILING} '
                     '--exit 226 -- "$@"\n')
    dcgmi.chmod(0o755)
    s = settings.model_copy(update={
        "remediation": type(settings.remediation)(
            mode="auto", release_mode="auto", hook="command",
            hook_config={"drain": ["true"], "release": ["true"]}, breaker_max_fraction=1.0),
        "diagnostics": type(settings.diagnostics).model_validate({
            "enabled": True, "site": "local", "local": {"node": "n001", "busy_check": ["true"]},
            "suites": {"dcgm_r3": {"command": [str(dcgmi), "diag", "-r", "3", "-j"],
                                   "parser": "dcgm_diag", "timeout_s": 60}},
            "gate": {"default": ["dcgm_r3"]}})})
    with running(s) as svc:
        yield svc

def _drained(svc: Svc) -> None:
    ctl = svc.st.pipeline.controller
    assert ctl is not None
    deadline = time.monotonic() + 20
    while not ctl.store.drains("n001"):
        assert time.monotonic() < deadline, "n001 was never drained"
        svc.round()
        ctl.wait(5)


@pytest.mark.slow
def test_a_release_waits_for_the_gate_and_a_skip_is_audited(svc: Svc) -> None:
    _drained(svc)
    diag = svc.st.pipeline.diagnostics
    assert diag is not None

    held = svc.call("POST", "/v1/nodes/n001/release", status=409)
    assert "stays drained until its return-to-service gate passes" in held["detail"]
    assert "started dcgm_r3" in held["detail"]
    assert diag.wait(60)
    runs = svc.call("GET", "/v1/nodes/n001/diagnostics", "read")["runs"]
    assert [(r["suite"], r["purpose"], r["status"]) for r in runs] == [
        ("dcgm_r3", "gate", "fail")]
    failed = [c for c in runs[0]["result"]["checks"] if c["status"] == "fail"]
    assert [(c["name"], c["gpu"]) for c in failed] == [("memory", 2)]
    svc.round()
    alerts = svc.call("GET", "/v1/alerts?node=n001", "read")["alerts"]
    node_alert = next(a for a in alerts if a["entity"] == "n001")
    assert node_alert["level"] == 3
    assert "diag_memory" in str(node_alert["explanation"])
    svc.call("GET", "/v1/nodes/nowhere/diagnostics", "read", status=404)

    done = svc.call("POST", "/v1/nodes/n001/release?skip_gate=DIMM%20and%20GPU%20replaced")
    assert done["kind"] == "release"
    audit = svc.st.pipeline.controller.store.audit(node="n001", limit=100)  # type: ignore
    skipped = [e for e in audit if e.event == "gate_skipped"]
    assert [(e.actor, e.result) for e in skipped] == [("operate", "DIMM and GPU replaced")]


@pytest.mark.slow
def test_an_operator_runs_a_suite_by_hand(svc: Svc) -> None:
    diag = svc.st.pipeline.diagnostics
    assert diag is not None
    svc.call("POST", "/v1/nodes/n001/diagnostics", "read", status=403, json={"suite": "dcgm_r3"})
    svc.call("POST", "/v1/nodes/n001/diagnostics", status=422, json={"suite": "nope"})
    svc.call("POST", "/v1/nodes/nowhere/diagnostics", status=404, json={"suite": "dcgm_r3"})
    got = svc.call("POST", "/v1/nodes/n001/diagnostics", status=202, json={"suite": "dcgm_r3"})
    assert got["detail"] == "started dcgm_r3 on n001 (local)"
    assert diag.wait(60)
    # n002 is not this local site's host: the run says so, as an error, never a pass.
    svc.call("POST", "/v1/nodes/n002/diagnostics", status=202, json={"suite": "dcgm_r3"})
    assert diag.wait(60)
    runs = {n: svc.call("GET", f"/v1/nodes/{n}/diagnostics", "read")["runs"]
            for n in ("n001", "n002")}
    assert [(r["purpose"], r["status"]) for r in runs["n001"]] == [("manual", "fail")]
    assert [(r["purpose"], r["status"]) for r in runs["n002"]] == [("manual", "error")]
    assert "runs on n001 only" in runs["n002"][0]["result"]["error"]
    audit = svc.st.pipeline.controller.store.audit(node="n001", limit=100)  # type: ignore
    assert [(e.event, e.actor) for e in audit if e.event.startswith("manual_")] == [
        ("manual_started", "operate"), ("manual_fail", "gate")]
