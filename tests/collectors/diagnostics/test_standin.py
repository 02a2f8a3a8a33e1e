"""tests/support/diag_standin.py prints a capture byte for byte and exits as told."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.collectors.own_captures import DCGM_R3_MEMORY_FAIL, NCCL_KILLED

STANDIN = Path(__file__).resolve().parents[2] / "support" / "diag_standin.py"


def test_prints_the_capture_and_exits_with_the_code() -> None:
    out = subprocess.run([sys.executable, str(STANDIN), str(DCGM_R3_MEMORY_FAIL), "--exit",
                          "226"], capture_output=True, check=False, timeout=60)
    assert out.returncode == 226 and out.stdout == DCGM_R3_MEMORY_FAIL.read_bytes()


def test_as_a_tool_it_ignores_the_tools_arguments() -> None:
    out = subprocess.run([sys.executable, str(STANDIN), "--standin", str(NCCL_KILLED),
                          "--sleep", "0.05", "--", "-b", "8", "-e", "8G", "-g", "8"],
                         capture_output=True, check=False, timeout=60)
    assert out.returncode == 0 and out.stdout == NCCL_KILLED.read_bytes()
