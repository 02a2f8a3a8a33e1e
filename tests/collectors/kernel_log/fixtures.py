"""Real kernel logs under ../shared/fixtures, read at test time (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures"
ISO_48_63_94 = ROOT / "xid-logs" / "gpud-dmesg-time-format-iso-xid48-63-94.log"
DECODE_13_43 = ROOT / "xid-logs" / "gpud-dmesg.decode.iso.log.0-xid13-43.log"
FABRICMANAGER = ROOT / "other" / "gpud-fabricmanager.log"
IB_FLAP_SYSLOG = ROOT / "other" / "azurehpc-1dev_6flap_syslog-ib-link-flap.txt"

# The ISO capture's GPU as nvidia-smi spells its bus id; index 3 is arbitrary.
GPU_MAP = {"00000000:19:00.0": 3}


def lines(path: Path) -> list[str]:
    """The file's lines, or a skip that says why the test cannot run."""
    if not path.is_file():
        pytest.skip(f"fixture {path.name} not found under {ROOT} (the shared checkout is absent)")
    return path.read_text().splitlines(keepends=True)
