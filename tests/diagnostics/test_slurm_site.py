"""The Slurm site against a real one-node Slurm cluster: a gate test runs on a node gpuhealth
drained through a maintenance reservation and leaves it drained as it was; nothing runs on a
node with a job on it, or one drained by someone else; a test past its time is cancelled."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from service.diagnostics.site import Purpose
from service.diagnostics.slurm_site import RESERVATION_PREFIX, SlurmSite, SlurmSiteConfig
from tests.remediation.slurm_cluster import SlurmCluster, job_fields, node_field, submit, wait_for

OUR_REASON = "gpuhealth:17:XID 79: GPU fell off the bus"


@pytest.fixture
def site(slurm_cluster: SlurmCluster) -> SlurmSite:
    return SlurmSite(SlurmSiteConfig(slurm_conf=str(slurm_cluster.conf), timeout_s=10,
                                     start_within_s=20))


def drain(cluster: SlurmCluster, reason: str = OUR_REASON) -> None:
    cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN",
                f"Reason={reason}")
    wait_for("node drained", lambda: "DRAIN" in node_field(cluster, "State"))


def reservations(cluster: SlurmCluster) -> str:
    return cluster.run("scontrol", "show", "reservation", check=False).stdout


@pytest.mark.slow
def test_a_gate_test_runs_on_our_drained_node_and_leaves_it_drained(
        cluster: SlurmCluster, site: SlurmSite) -> None:
    drain(cluster)
    waiting = submit(cluster)  # a user's job, queued while the node is drained

    ran = site.run(cluster.node, ["sh", "-c", "echo busbw 380; echo warn >&2; exit 3"], 60,
                   Purpose.GATE)

    assert not ran.refused, ran
    assert ran.exit_code == 3 and ran.stdout == "busbw 380\n" and "warn" in ran.stderr
    assert node_field(cluster, "Reason") == OUR_REASON
    assert "DRAIN" in node_field(cluster, "State")
    assert "No reservations" in reservations(cluster)
    # The user's job never ran on the node meanwhile (the reservation held it off).
    assert job_fields(cluster, waiting)["JobState"] == "PENDING"
    calls = [s.call for s in ran.steps]
    assert any(c.startswith("scontrol create reservation") and "Flags=MAINT" in c
               for c in calls)
    assert any(c.startswith("srun --reservation=" + RESERVATION_PREFIX) for c in calls)
    assert calls[-2].startswith(shlex.join(["scontrol", "update", f"NodeName={cluster.node}",
                                            "State=DRAIN"]))
    assert calls[-1].startswith("scontrol delete")


@pytest.mark.slow
def test_nothing_runs_on_a_node_with_a_job(cluster: SlurmCluster, site: SlurmSite,
                                           tmp_path: Path) -> None:
    job = submit(cluster)
    wait_for("job running", lambda: job_fields(cluster, job)["JobState"] == "RUNNING")
    marker = f"{tmp_path}/ran"

    swept = site.run(cluster.node, ["touch", marker], 60, Purpose.SWEEP)
    drain(cluster)  # draining with the job still on it
    gated = site.run(cluster.node, ["touch", marker], 60, Purpose.GATE)

    for ran in (swept, gated):
        assert ran.exit_code is None
        assert "not testing" in ran.refused, ran.refused
    assert f"job(s) on it ({job})" in gated.refused
    assert job_fields(cluster, job)["JobState"] == "RUNNING"
    assert "No reservations" in reservations(cluster)
    assert not any("srun" in s.call for r in (swept, gated) for s in r.steps)
    assert not os.path.exists(marker)


def test_a_gate_leaves_nodes_it_does_not_hold(cluster: SlurmCluster, site: SlurmSite) -> None:
    idle = site.run(cluster.node, ["true"], 60, Purpose.GATE)
    drain(cluster, "hands off: DIMM swap")
    other = site.run(cluster.node, ["true"], 60, Purpose.SWEEP)

    assert "not drained by gpuhealth" in idle.refused
    assert "drained by someone else" in other.refused
    assert node_field(cluster, "Reason") == "hands off: DIMM swap"


@pytest.mark.parametrize("name", ["n1,n2", "gpu[001-512]", "-h", "a b"])
def test_a_hostile_name_reaches_no_command(site: SlurmSite, name: str) -> None:
    ran = site.run(name, ["true"], 60, Purpose.MANUAL)
    assert "not one plain host name" in ran.refused and not ran.steps


@pytest.mark.slow
def test_a_test_past_its_time_is_cancelled_and_the_node_drained_again(
        cluster: SlurmCluster, slurm_cluster: SlurmCluster) -> None:
    site = SlurmSite(SlurmSiteConfig(slurm_conf=str(slurm_cluster.conf), timeout_s=10,
                                     start_within_s=30))  # a loaded machine resumes slowly
    drain(cluster)

    ran = site.run(cluster.node, ["sh", "-c", "echo partial; sleep 300"], 3, Purpose.GATE)

    assert ran.timed_out and ran.exit_code is None
    assert "partial" in ran.stdout
    assert any(s.call.startswith("scancel --name=gpuhealth-diag") for s in ran.steps)
    wait_for("the test job gone", lambda: not cluster.run(
        "squeue", "-h", "-t", "R,CG", check=False).stdout.strip())
    assert node_field(cluster, "Reason") == OUR_REASON
    assert "No reservations" in reservations(cluster)
