"""The real IB sysfs captures in the shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / ".." / "shared" / "fixtures" / "infiniband-sysfs"
H100 = FIXTURES / "gpud-sys-class-infiniband-h100.0"
TTAR = FIXTURES / "procfs-fixtures.ttar"
TTAR_ROOT = Path("fixtures", "sys", "class", "infiniband")  # where the IB tree sits in the ttar

needs_h100 = pytest.mark.skipif(
    not H100.is_dir(),
    reason="IB sysfs capture not found at ../shared/fixtures/infiniband-sysfs "
           "(relative to the repo root)",
)
needs_ttar = pytest.mark.skipif(
    not TTAR.is_file(),
    reason="procfs-fixtures.ttar not found at ../shared/fixtures/infiniband-sysfs",
)
