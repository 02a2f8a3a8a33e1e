"""Fixtures for the remediation hook tests. `slurm_cluster` starts a real one-node Slurm
cluster once per session (about a second); it is skipped only where Slurm or munge are not
installed or we are not root (slurmd must be)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.remediation.slurm_cluster import SlurmCluster, missing_binaries


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
