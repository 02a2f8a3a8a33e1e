"""Sweeps on a real one-node Slurm cluster: an idle node due for a test is swept through the
Slurm site (stand-in tools printing our captures) and stays at work; a failing sweep publishes
the `diag` event its rule pages on; a node with a job is never swept (the refusal is stored,
and the node is not asked again before `retry_after_s`); a drained node is the gate's."""

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
from service.diagnostics.site import Purpose
from service.diagnostics.slurm_site import SlurmSite, SlurmSiteConfig
from service.diagnostics.sweep import Sweeper
from service.remediation.hooks.runner import Completed
from tests.remediation.slurm_cluster import SlurmCluster, job_fields, node_field, submit, wait_for

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "collectors" / "captures" / "diagnostics"
STANDIN = REPO / "tests" / "support" / "diag_standin.py"


def tool(bin_dir: Path, name: str, capture: str, code: int = 0) -> Path:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} --standin '
                    f'{CAPTURES / capture} --exit {code} -- "$@"\n')
    path.chmod(0o755)
    return path


def sweeper(cluster: SlurmCluster, exe: Path, published: list[Batch],
            held: bool = False) -> Sweeper:
    settings = DiagnosticsServiceSettings.model_validate({
        "enabled": True,
        "slurm": {"slurm_conf": str(cluster.conf), "timeout_s": 10, "start_within_s": 20},
        "suites": {"burn": {"command": [str(exe), "30"], "parser": "gpu_burn",
                            "timeout_s": 120}},
        "gate": {"default": ["burn"]},
        "sweep": {"enabled": True, "suite": "burn", "every_days": 1, "interval_s": 5,
                  "retry_after_s": 3600}})
    diag = Diagnostics(settings, RunStore(":memory:"), SlurmSite(settings.slurm),
                       audit=lambda e: None, publish=published.append)
    return Sweeper(settings.sweep, settings.suites["burn"], diag,
                   nodes=lambda: [cluster.node], held=lambda node: held)


def wait_idle(s: Sweeper) -> None:
    wait_for("the sweep to end", lambda: not s.running(), timeout_s=120)


@pytest.mark.slow
def test_an_idle_node_is_swept_and_a_failure_is_published(cluster: SlurmCluster,
                                                          tmp_path: Path) -> None:
    published: list[Batch] = []
    s = sweeper(cluster, tool(tmp_path, "gpu_burn", "gpu-burn/8xh100-ok.txt"), published)
    now = time.time()

    assert s.step(now) == [cluster.node]
    assert s.step(now + 1) == []  # not due again: the pass interval
    wait_idle(s)
    [run] = s.diag.runs.for_node(cluster.node)
    assert (run.purpose, run.status) == (Purpose.SWEEP, "pass"), run
    assert node_field(cluster, "State") == "IDLE"
    assert published[-1].events.values == [float(FaultClass.PASSED)]
    assert s.step(now + 10) == []  # tested a moment ago: due in a day

    tool(tmp_path, "gpu_burn", "gpu-burn/8xh100-faulty.txt", 1)
    assert s.step(now + 86400 + 10) == [cluster.node]
    wait_idle(s)
    assert [r.status for r in s.diag.runs.for_node(cluster.node)] == ["fail", "pass"]
    assert published[-1].events.values == [float(FaultClass.DATA_CORRUPTION)]
    s.close()


@pytest.mark.slow
def test_a_node_with_a_job_is_never_swept(cluster: SlurmCluster, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    exe = tmp_path / "gpu_burn"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\n")
    exe.chmod(0o755)
    job = submit(cluster)
    wait_for("job running", lambda: job_fields(cluster, job)["JobState"] == "RUNNING")
    s = sweeper(cluster, exe, [])
    now = time.time()

    assert s.step(now) == [cluster.node]
    wait_idle(s)
    [run] = s.diag.runs.for_node(cluster.node)
    assert run.status == "error" and run.result is not None
    assert "is not idle (State=MIXED" in run.result.error
    assert not marker.exists()
    assert job_fields(cluster, job)["JobState"] == "RUNNING"
    assert s.step(now + 600) == []  # turned away: not asked again before retry_after_s
    assert s.step(now + 3700) == [cluster.node]
    wait_idle(s)
    s.close()


def test_a_node_gpuhealth_holds_is_the_gates(slurm_cluster: SlurmCluster,
                                             tmp_path: Path) -> None:
    s = sweeper(slurm_cluster, tmp_path / "none", [], held=True)
    assert s.step(time.time()) == []
    s.close()


class Queue:
    """A runner answering squeue's pending listing, and failing anything else loudly."""

    def __init__(self, pending: str) -> None:
        self.pending = pending

    def run(self, argv: list[str], timeout_s: float) -> Completed:
        if "--states=PENDING" in argv:
            return Completed(0, self.pending, "", 0.01)
        raise AssertionError(f"unexpected call {argv}")


@pytest.mark.parametrize(("pending", "refused"), [
    ("12|Resources\n13|Priority\n", "2 job(s) wait in the queue"),
    ("14|BeginTime\n15|JobHeldUser\n16|Dependency\n", ""),
    ("", "")])
def test_a_sweep_takes_only_capacity_nobody_waits_for(pending: str, refused: str) -> None:
    site = SlurmSite(SlurmSiteConfig(), runner=Queue(pending))
    assert site.queued([]).startswith(refused)
    if not refused:
        assert site.queued([]) == ""
