"""Fixtures for the remediation hook tests. `slurm_cluster` starts a real one-node Slurm
cluster once per session (about a second); it is skipped only where Slurm or munge are not
installed or we are not root (slurmd must be)."""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator

import pytest

from tests.remediation.slurm_cluster import SlurmCluster, missing_binaries, node_field, wait_for


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Slurm/munge not installed (missing {', '.join(missing)}); "
                    "apt-get install slurmctld slurmd slurm-client munge")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start the test cluster")
    cluster = SlurmCluster(root=tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session cluster, and afterwards: no jobs, node resumed and idle."""
    yield slurm_cluster
    slurm_cluster.run("scancel", "--quiet", f"--user={getpass.getuser()}", check=False)
    wait_for("jobs to end", lambda: not slurm_cluster.run(
        "squeue", "-h", "-t", "R,CG,S,CF", check=False).stdout.strip())
    if "DRAIN" in node_field(slurm_cluster, "State"):
        slurm_cluster.run("scontrol", "update", f"NodeName={slurm_cluster.node}",
                          "State=RESUME")
    wait_for("node idle", lambda: node_field(slurm_cluster, "State") == "IDLE")
