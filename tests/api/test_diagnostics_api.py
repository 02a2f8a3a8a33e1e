"""Diagnostics through the real app (diagnostics on, the local site): a node's runs and its
repeat-offender record, the fleet's repeat offenders paged with a cursor, the operator's word
that a flagged node's hardware was replaced (operate, idempotent, audited), and the
diagnostics on /metrics (runs by outcome counted on from scrape to scrape, each node's last
result, the flag), which promtool accepts. The history is written into the service's own
stores as the controller and the gate write it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collectors.diagnostics.result import Check, Status, build
from service.api.app import create_app
from service.api.state import Running
from service.api.timefmt import rfc3339
from service.diagnostics.gate import Diagnostics
from service.diagnostics.offenders import DAY
from service.diagnostics.site import Purpose
from service.remediation.actions import Action, ActionState, ActionStore, AuditEntry
from service.settings import Settings
from tests.support.fleet import T0, Fleet, FleetCollector, ManualClock

PROMTOOL = shutil.which("promtool")


@dataclass
class Svc:
    client: TestClient
    st: Running
    clock: ManualClock
    tokens: dict[str, str]
    diag: Diagnostics
    store: ActionStore

    def call(self, method: str, url: str, scope: str | None = "operate", status: int = 200,
             **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if scope is not None:
            headers["Authorization"] = f"Bearer {self.tokens[scope]}"
        r = self.client.request(method, url, headers=headers, **kw)
        assert r.status_code == status, r.text
        return r.json()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        r = self.client.get("/metrics")
        assert r.status_code == 200
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(r.text) for s in fam.samples}

    # -- history, as the controller and the gate leave it --------------------------------------

    def released(self, node: str, days: float, drain: str = "act-d") -> None:
        self.store.append_audit(AuditEntry(at=T0 + days * DAY, actor="gpuhealth",
                                           event="released", action_id=drain, node=node))

    def drained(self, node: str, days: float, alert: int) -> None:
        at = T0 + days * DAY
        a = Action(id=f"act-{node}-{alert}", kind="migrate", episode=str(alert), node=node,
                   alert_id=alert, fingerprint=f"fp{alert}", summary=f"{node}: NVLink down",
                   mode="auto", state=ActionState.PLANNED, requested_at=at, deadline=None)
        note = AuditEntry(at=at, actor="gpuhealth", event="requested", action_id=a.id,
                          node=node)
        self.store.insert(a, note)
        self.store.update(a.id, state=ActionState.EXECUTING, started_at=at)
        self.store.update(a.id, state=ActionState.SUCCEEDED, finished_at=at, drained=True)

    def ran(self, node: str, days: float, status: Status, gpu: int | None = None,
            suite: str = "dcgm_r3", purpose: Purpose = Purpose.SWEEP) -> None:
        runs = self.diag.runs
        run = runs.start(node, suite, purpose, "", "local", T0 + days * DAY)
        checks = [Check("memory", status, gpu=gpu, detail="row remap failure")
                  if status is not Status.ERROR else Check("memory", Status.ERROR)]
        runs.finish(run.id, build(suite, checks), T0 + days * DAY + 600)


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    s = settings.model_copy(update={
        "remediation": type(settings.remediation)(
            mode="approve", hook="command",
            hook_config={"drain": ["true"], "release": ["true"]}, breaker_max_fraction=1.0),
        "diagnostics": type(settings.diagnostics).model_validate(
            {"enabled": True, "site": "local", "offenders": {"cache_s": 0}})})
    fleet, clock = Fleet({"n001": 4, "n002": 4, "n003": 4}), ManualClock(T0 + 30 * DAY)
    app = create_app(s, clock=clock, schedule=False, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        auth = app.state.gpuhealth_auth
        tokens = {scope: auth.tokens.create(scope, scope, clock())[1]
                  for scope in ("read", "operate")}
        st: Running = app.state.gpuhealth
        diag, ctl = st.pipeline.diagnostics, st.pipeline.controller
        assert diag is not None and ctl is not None
        assert diag.offenders is not None and diag.clock is clock  # built by the wiring
        st.scheduler.collect_once("fleet")
        st.scheduler.score_once()
        yield Svc(client, st, clock, tokens, diag, ctl.store)


def _history(svc: Svc) -> None:
    """n001 failed a sweep on GPU 2 two days after its release (flagged); n002 was drained
    again 15 days after its release (a repeater, not flagged); n003 stayed well."""
    svc.released("n001", 10)
    svc.ran("n001", 12, Status.FAIL, gpu=2)
    svc.released("n002", 1)
    svc.drained("n002", 16, alert=5)
    svc.released("n003", 5)
    svc.ran("n003", 6, Status.PASS)


def test_a_nodes_runs_come_with_its_offender_record(svc: Svc) -> None:
    _history(svc)
    body = svc.call("GET", "/v1/nodes/n001/diagnostics", "read")
    [run] = body["runs"]
    assert run["status"] == "fail" and run["purpose"] == "sweep"
    assert run["result"]["checks"][0]["gpu"] == 2
    off = body["offender"]
    assert off["flagged"] is True and (off["returns_soon"], off["returns_window"]) == (1, 1)
    assert off["why"].startswith("needs hardware replacement: failed again 2.0 days after its "
                                 f"release on {rfc3339(T0 + 10 * DAY)[:10]}")
    assert "memory on GPU 2: fail: row remap failure" in off["why"]
    assert off["last_release_at"] == rfc3339(T0 + 10 * DAY)
    assert off["returns"][0]["failed_at"] == rfc3339(T0 + 12 * DAY + 600)
    assert [g["gpu"] for g in off["gpus"]] == [2]
    assert (off["soon_days"], off["window_days"], off["replace_after"]) == (7, 30, 2)

    well = svc.call("GET", "/v1/nodes/n003/diagnostics", "read")["offender"]
    assert (well["flagged"], well["returns"], well["releases"]) == (False, [], 1)
    svc.call("GET", "/v1/nodes/nope/diagnostics", "read", 404)


def test_the_fleet_list_pages_flagged_first(svc: Svc) -> None:
    _history(svc)
    whole = svc.call("GET", "/v1/diagnostics/offenders", "read")
    assert [(o["node"], o["flagged"]) for o in whole["offenders"]] == [
        ("n001", True), ("n002", False)]
    assert whole["next_cursor"] is None
    assert whole["offenders"][1]["returns"][0]["evidence"].startswith(
        "drained again by act-n002-5: n002: NVLink down")
    first = svc.call("GET", "/v1/diagnostics/offenders?limit=1", "read")
    assert [o["node"] for o in first["offenders"]] == ["n001"] and first["next_cursor"]
    rest = svc.call("GET", f"/v1/diagnostics/offenders?limit=1&cursor={first['next_cursor']}",
                    "read")
    assert [o["node"] for o in rest["offenders"]] == ["n002"] and rest["next_cursor"] is None
    flagged = svc.call("GET", "/v1/diagnostics/offenders?flagged=true", "read")["offenders"]
    assert [o["node"] for o in flagged] == ["n001"]
    other = svc.call("GET", "/v1/nodes?limit=1", "read")["next_cursor"]
    svc.call("GET", f"/v1/diagnostics/offenders?cursor={other}", "read", 400)


def test_replaced_clears_the_flag_once_audited_and_idempotent(svc: Svc) -> None:
    _history(svc)
    url = "/v1/nodes/n001/replaced"
    body = {"reason": "GPU baseboard swapped, RMA 4411"}
    svc.call("POST", url, None, 401, json=body)
    svc.call("POST", url, "read", 403, json=body)
    svc.call("POST", url, "operate", 422, json={"reason": ""})
    svc.call("POST", "/v1/nodes/nope/replaced", "operate", 404, json=body)
    key = {"Idempotency-Key": "replace-n001-1"}
    got = svc.call("POST", url, json=body, headers=key)
    assert got["was_flagged"] is True and got["flagged"] is False
    assert got["replaced"]["by"] == "operate" and got["replaced"]["reason"] == body["reason"]
    assert svc.call("POST", url, json=body, headers=key) == got  # replayed, not run again
    rows = [e for e in svc.store.audit(node="n001") if e.event == "replaced"]
    assert [(e.actor, e.result) for e in rows] == [("operate", body["reason"])]
    assert [o["node"] for o in svc.call("GET", "/v1/diagnostics/offenders", "read")
            ["offenders"]] == ["n002"]


def test_diagnostics_on_metrics(svc: Svc) -> None:
    _history(svc)
    s = svc.samples()
    runs = {k[1]: v for k, v in s.items() if k[0] == "gpuhealth_diagnostic_runs_total"}
    assert runs == {(("purpose", "sweep"), ("status", "fail"), ("suite", "dcgm_r3")): 1,
                    (("purpose", "sweep"), ("status", "pass"), ("suite", "dcgm_r3")): 1}
    status = {k[1]: v for k, v in s.items() if k[0] == "gpuhealth_node_diagnostic_status"}
    assert status == {(("node", "n001"),): 1, (("node", "n003"),): 0}
    flag = {k[1]: v for k, v in s.items() if k[0] == "gpuhealth_node_repeat_offender"}
    assert flag == {(("node", "n001"),): 1, (("node", "n002"),): 0}

    # Counted on: a run still running is not counted until it ends; the node's newest ends.
    running = svc.diag.runs.start("n003", "nccl", Purpose.GATE, "act-x", "local",
                                  T0 + 20 * DAY)
    svc.ran("n003", 21, Status.ERROR, suite="nccl", purpose=Purpose.GATE)
    s = svc.samples()
    gate = (("purpose", "gate"), ("status", "error"), ("suite", "nccl"))
    assert s[("gpuhealth_diagnostic_runs_total", gate)] == 1
    assert s[("gpuhealth_node_diagnostic_status", (("node", "n003"),))] == 2
    svc.diag.runs.finish(running.id, build("nccl", [Check("busbw_gbps", Status.PASS)]),
                         T0 + 22 * DAY)
    s = svc.samples()
    assert s[("gpuhealth_diagnostic_runs_total", gate)] == 1
    passed = (("purpose", "gate"), ("status", "pass"), ("suite", "nccl"))
    assert s[("gpuhealth_diagnostic_runs_total", passed)] == 1
    assert s[("gpuhealth_node_diagnostic_status", (("node", "n003"),))] == 0
    assert s[("gpuhealth_diagnostic_runs_total", (("purpose", "sweep"), ("status", "fail"),
                                                  ("suite", "dcgm_r3")))] == 1  # not twice

    svc.call("POST", "/v1/nodes/n001/replaced", json={"reason": "new board"})
    flag = {k[1]: v for k, v in svc.samples().items()
            if k[0] == "gpuhealth_node_repeat_offender"}
    assert flag == {(("node", "n002"),): 0}


@pytest.mark.skipif(PROMTOOL is None,
                    reason="promtool is not installed (apt-get install prometheus; .ci/run does)")
def test_promtool_accepts_the_diagnostics_families(svc: Svc) -> None:
    _history(svc)
    text = svc.client.get("/metrics").text
    assert "gpuhealth_node_repeat_offender{" in text
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_off_without_diagnostics(settings: Settings) -> None:
    app = create_app(settings, clock=ManualClock(T0), schedule=False)
    with TestClient(app) as client:
        r = client.get("/v1/diagnostics/offenders")
        assert r.status_code == 503 and "diagnostics are off" in r.json()["detail"]
        assert "gpuhealth_diagnostic_runs_total" not in client.get("/metrics").text
