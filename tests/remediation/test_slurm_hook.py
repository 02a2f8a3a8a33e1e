"""The Slurm hook against a real one-node Slurm cluster (tests/remediation/slurm_cluster.py):
real scontrol/squeue/sbatch, real drains and requeues."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest
from service.remediation.hooks.runner import SubprocessRunner
from service.remediation.hooks.slurm import (
    MAX_REASON,
    SlurmConfig,
    SlurmHook,
    drain_reason,
    parse_node,
)
from service.remediation.hooks.target import GuardedHook
from tests.remediation.slurm_cluster import (
    SlurmCluster,
    job_fields,
    node_field,
    submit,
    wait_for,
)


def request(node: str, summary: str = "XID 79: GPU fell off the bus") -> ActionRequest:
    return ActionRequest(action_id="act-1", node=node, alert_id=17, fingerprint="fp17",
                         summary=summary, requested_at=time.time())


@pytest.fixture
def hook(slurm_cluster: SlurmCluster) -> SlurmHook:
    # Built through the registry, as the controller does; slurm_conf becomes SLURM_CONF.
    built = build_hook("slurm", {"slurm_conf": str(slurm_cluster.conf), "timeout_s": 10})
    assert isinstance(built, GuardedHook) and isinstance(built.inner, SlurmHook)
    return built.inner


@pytest.mark.slow
def test_execute_drains_requeues_eligible_and_reports_the_rest(
        cluster: SlurmCluster, hook: SlurmHook) -> None:
    movable = submit(cluster, "--requeue")
    pinned = submit(cluster, "--no-requeue")
    wait_for("both jobs running", lambda: all(
        job_fields(cluster, j)["JobState"] == "RUNNING" for j in (movable, pinned)))
    req = request(cluster.node)

    result = hook.execute(req)

    assert result.ok, result.as_dict()
    assert not result.retry
    assert "DRAIN" in node_field(cluster, "State")
    assert node_field(cluster, "Reason") == drain_reason(req)
    assert drain_reason(req) == "gpuhealth XID 79 #17: GPU fell off the bus"
    assert result.moved == (movable,)
    [left] = result.left
    assert left.startswith(f"job {pinned}: not requeueable")
    requeued = job_fields(cluster, movable)
    assert requeued["Restarts"] == "1"
    assert requeued["JobState"] in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "COMPLETING")
    assert job_fields(cluster, pinned)["JobState"] == "RUNNING"  # a drain lets it finish
    assert [s.call.split()[:2] for s in result.steps] == [
        ["scontrol", "show"], ["scontrol", "update"], ["squeue", "-h"], ["scontrol", "requeue"]]
    assert all(s.ok for s in result.steps)
    assert hook.inspect(cluster.node).drained_by_us


def test_release_resumes_our_drain(cluster: SlurmCluster, hook: SlurmHook) -> None:
    assert hook.execute(request(cluster.node)).ok
    assert "DRAIN" in node_field(cluster, "State")

    result = hook.release(cluster.node)

    assert result.ok, result.detail
    assert result.steps[-1].call == shlex.join(
        ["scontrol", "update", f"NodeName={cluster.node}", "State=RESUME"])
    assert "DRAIN" not in node_field(cluster, "State")
    state = hook.inspect(cluster.node)
    assert state.exists and not state.drained_by_us and not state.drained_by_other
    again = hook.release(cluster.node)
    assert again.ok and "nothing to resume" in again.detail


def test_someone_elses_drain_is_not_resumed(cluster: SlurmCluster, hook: SlurmHook) -> None:
    cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN",
                "Reason=ops: replacing PSU")

    result = hook.release(cluster.node)

    assert not result.ok and not result.retry
    assert "drained by someone else" in result.detail and "ops: replacing PSU" in result.detail
    assert [s.call.split()[1] for s in result.steps] == ["show"]  # no update was sent
    assert node_field(cluster, "Reason") == "ops: replacing PSU"
    state = hook.inspect(cluster.node)
    assert state.drained_by_other and not state.drained_by_us


def test_reason_is_one_bounded_line_and_parses_back(
        cluster: SlurmCluster, hook: SlurmHook) -> None:
    summary = "ECC storm\non gpu 3 [a@b] x=y\t" + "z" * 400
    req = request(cluster.node, summary)

    assert hook.execute(req).ok

    reason = drain_reason(req)
    assert "\n" not in reason and "\t" not in reason and len(reason) == MAX_REASON
    assert node_field(cluster, "Reason") == reason
    assert hook.inspect(cluster.node).extra["reason"] == reason


def test_plan_is_the_exact_argv_and_changes_nothing(
        cluster: SlurmCluster, hook: SlurmHook) -> None:
    req = request(cluster.node)

    plan = hook.plan(req)

    assert plan[0].call == shlex.join(["scontrol", "show", "node", "-o", cluster.node])
    assert plan[1].call == shlex.join(
        ["scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN",
         "Reason=gpuhealth XID 79 #17: GPU fell off the bus"])
    assert plan[2].call == shlex.join(
        ["squeue", "-h", f"--nodelist={cluster.node}", "-t",
         "CONFIGURING,RUNNING,STOPPED,SUSPENDED", "-O", "JobID:|,State:|,Requeue:|,BatchFlag:|"])
    assert plan[3].call.startswith("scontrol requeue Incomplete")
    assert node_field(cluster, "State") == "IDLE"


@pytest.mark.slow
def test_requeue_off_drains_and_reports_every_job(
        cluster: SlurmCluster) -> None:
    job = submit(cluster, "--requeue")
    wait_for("job running", lambda: job_fields(cluster, job)["JobState"] == "RUNNING")
    # An explicit runner carrying SLURM_CONF, as a deployment might inject one.
    hook = SlurmHook(SlurmConfig(requeue=False),
                     runner=SubprocessRunner(env={"SLURM_CONF": str(cluster.conf)}))

    result = hook.execute(request(cluster.node))

    assert result.ok and result.moved == ()
    assert result.left == (f"job {job}: requeue is off in the hook config; "
                           "it runs on until it ends",)
    assert job_fields(cluster, job)["Restarts"] == "0"


def test_unknown_node(cluster: SlurmCluster, hook: SlurmHook) -> None:
    result = hook.execute(request("no-such-node"))
    assert not result.ok and not result.retry
    assert result.detail == "no-such-node is not a Slurm node; nothing drained"
    assert [s.call.split()[1] for s in result.steps] == ["show"]  # no update was sent
    assert not hook.inspect("no-such-node").exists
    assert "not found" in hook.release("no-such-node").detail


def test_missing_binary_is_a_clear_permanent_failure(tmp_path: Path) -> None:
    hook = SlurmHook(SlurmConfig(scontrol=str(tmp_path / "no-scontrol")))

    for result in (hook.execute(request("n1")), hook.release("n1")):
        assert not result.ok and not result.retry
        assert f"cannot run '{tmp_path / 'no-scontrol'}'" in result.detail
        assert "is Slurm's client installed" in result.detail
    assert "error" in hook.inspect("n1").extra


def test_parse_node_keeps_odd_reasons() -> None:
    line = ("NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 "
            "Reason=gpuhealth:3:say \"hi\" a=b [x@y] it's [root@2026-11-30T15:50:37]")
    info = parse_node(line)
    assert info.state == "IDLE+DRAIN" and info.drained and info.ours
    assert info.reason == "gpuhealth:3:say \"hi\" a=b [x@y] it's"
    assert parse_node("NodeName=n1 State=IDLE Reason=(null)").reason == ""


def test_a_drain_reason_starts_with_its_cause() -> None:
    """`sinfo -R` shows 20 characters of a reason: the cause is in them; ours is told by the
    provenance word, in this release's form and the older `gpuhealth:<id>:` one."""
    req = request("n1", "DBE gpu3: n1:gpu3 on n1: risk 1.00 (dbe: uncorrectable ECC = 1)")
    reason = drain_reason(req)
    assert reason[:20] == "gpuhealth DBE gpu3 #"
    assert reason == "gpuhealth DBE gpu3 #17: n1:gpu3 on n1: risk 1.00 (dbe: uncorrectable ECC = 1)"
    no_cause = drain_reason(request("n1", "n1:gpu3 on n1: risk 0.40 (no signal)"))
    assert no_cause == "gpuhealth #17: n1:gpu3 on n1: risk 0.40 (no signal)"
    for ours in (reason, no_cause, "gpuhealth:3:XID 79"):
        assert parse_node(f"NodeName=n1 State=IDLE+DRAIN Reason={ours} [root@2026-12-07T10:00:00]"
                          ).ours, ours
    assert not parse_node("NodeName=n1 State=IDLE+DRAIN Reason=gpuhealthy fans [a@b]").ours
