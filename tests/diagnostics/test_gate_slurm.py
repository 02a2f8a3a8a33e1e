"""The return-to-service gate end to end on a real one-node Slurm cluster: the remediation
controller drains the node for an ECC fault through the real Slurm hook; a release waits for
the memory suite, which runs on the node through the Slurm site (a stand-in `dcgmi` printing
our own capture of DCGM's JSON); a failing run keeps the node drained, reports the failed check
as a `diag` event and says so in the audit; after the repair a passing run releases it through
the hook, and every step is in the audit."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from collectors.diagnostics.classes import FaultClass
from collectors.frames import Batch
from service.diagnostics.gate import Diagnostics
from service.diagnostics.runs import RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.slurm_site import SlurmSite
from service.remediation.actions import ActionConflict, ActionStore
from service.remediation.config import RemediationSettings
from service.remediation.controller import MigrationRequest, RemediationController
from service.remediation.hooks import build_hook
from tests.remediation.slurm_cluster import SlurmCluster, node_field, wait_for

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "collectors" / "captures" / "diagnostics" / "dcgm"
STANDIN = REPO / "tests" / "support" / "diag_standin.py"


class StillFiring:
    """The alert behind the drain still holds (the controller's last guard)."""

    def recheck(self, node: str, fingerprint: str, now: float) -> str | None:
        return None


def dcgmi(bin_dir: Path, capture: str, code: int) -> Path:
    """A `dcgmi` on the node that prints our capture of its output and exits with `code`."""
    tool = bin_dir / "dcgmi"
    tool.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} --standin '
                    f'{CAPTURES / capture} --exit {code} -- "$@"\n')
    tool.chmod(0o755)
    return tool


@pytest.mark.slow
def test_a_release_waits_for_the_gate_and_a_failing_gate_keeps_the_node(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    node = cluster.node
    tool = dcgmi(tmp_path, "diag-r3-memory-fail-v4.json", 226)
    conf = {"slurm_conf": str(cluster.conf), "timeout_s": 10}
    controller = RemediationController(
        ActionStore(":memory:"), build_hook("slurm", conf),
        RemediationSettings(mode="auto", release_mode="auto"),
        recheck=StillFiring(), fleet_size=lambda: 100)
    published: list[Batch] = []
    settings = DiagnosticsServiceSettings.model_validate({
        "enabled": True, "slurm": {**conf, "start_within_s": 20},
        "suites": {"dcgm_r3": {"command": [str(tool), "diag", "-r", "3", "-j"],
                               "parser": "dcgm_diag", "timeout_s": 120}},
        "gate": {"default": ["dcgm_r3"]}})
    gate = Diagnostics(settings, RunStore(":memory:"), SlurmSite(settings.slurm),
                       audit=controller.store.append_audit, publish=published.append)
    controller.gate = gate
    gate.release = lambda n, actor, now: controller.release(n, actor, now)
    now = time.time()

    controller.request(MigrationRequest(node, 7, "fp7", 3, 1.0,
                                        "dbe: uncorrectable ECC error in HBM", now), now)
    assert controller.wait(20)
    controller.step(time.time())
    assert node_field(cluster, "Reason").startswith("gpuhealth dbe #7: "), [
        (e.event, e.result) for e in controller.store.audit(node=node, limit=100)]

    # The operator asks for the release: the memory suite starts instead, and fails.
    with pytest.raises(ActionConflict, match=r"started dcgm_r3 .*failure class memory"):
        controller.release(node, "alice", time.time())
    with pytest.raises(ActionConflict, match="tests are running"):
        controller.release(node, "alice", time.time())
    assert gate.wait(120)
    [run] = gate.runs.for_node(node)
    assert run.status == "fail" and run.result is not None
    assert "memory" in {c.name for c in run.result.checks if c.status.value == "fail"}
    assert "DRAIN" in node_field(cluster, "State")
    assert node_field(cluster, "Reason").startswith("gpuhealth dbe #7: ")
    [batch] = published
    assert (batch.events.keys, batch.events.metrics, batch.events.values) == (
        [node], ["diag"], [float(FaultClass.MEMORY)])
    assert not controller.store.find(node=node, kind="release", limit=10)

    # Repaired: the next ask runs the suite again; it passes and the node goes back to work.
    dcgmi(tmp_path, "diag-r3-pass-v4.json", 0)
    with pytest.raises(ActionConflict, match="the last run \\(dcgm_r3\\) ended fail"):
        controller.release(node, "alice", time.time())
    assert gate.wait(120)
    assert [r.status for r in gate.runs.for_node(node)] == ["pass", "fail"]
    assert published[-1].events.values == [float(FaultClass.PASSED)]
    controller.step(time.time())
    assert controller.wait(20)
    controller.step(time.time())
    wait_for("node idle", lambda: node_field(cluster, "State") == "IDLE")
    events = [(e.event, e.actor) for e in controller.store.audit(node=node, limit=100)]
    gate_events = [e for e in events if e[0].startswith("gate_")]
    assert gate_events == [("gate_started", "alice"), ("gate_failed", "gate"),
                           ("gate_started", "alice"), ("gate_passed", "gate")]
    assert events[-2:] == [("succeeded", "gpuhealth"), ("released", "gpuhealth")]
    [release] = controller.store.find(node=node, kind="release", limit=10)
    assert release.state == "succeeded" and release.actor == "gate"
    failed = next(e for e in controller.store.audit(node=node, limit=100)
                  if e.event == "gate_failed")
    assert "memory on GPU" in failed.result and "stays drained" in failed.result
    gate.close()
    controller.close()
