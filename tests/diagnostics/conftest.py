"""The diagnostics tests drive the same real one-node Slurm cluster as the remediation hook
tests (tests/remediation/conftest.py)."""

from tests.remediation.conftest import cluster, slurm_cluster

__all__ = ["cluster", "slurm_cluster"]
