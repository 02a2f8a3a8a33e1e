"""The local site runs a suite on this host only while its GPUs run nothing: a busy check that
lists a process, fails, hangs or cannot start refuses the test; another node's name is
refused; a run past its time limit keeps what it printed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from service.diagnostics.local_site import LocalSite, LocalSiteConfig
from service.diagnostics.site import Purpose


def script(tmp: Path, name: str, body: str) -> str:
    path = tmp / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def site(busy: list[str]) -> LocalSite:
    return LocalSite(LocalSiteConfig(busy_check=busy, busy_timeout_s=2), node="n1")


def test_an_idle_host_runs_the_suite(tmp_path: Path) -> None:
    ran = site([script(tmp_path, "smi", "exit 0")]).run(
        "n1", [sys.executable, "-c", "print('busbw 400'); raise SystemExit(3)"], 30,
        Purpose.MANUAL)
    assert not ran.refused and ran.exit_code == 3 and ran.stdout == "busbw 400\n"
    assert [s.ok for s in ran.steps] == [True, False]


@pytest.mark.parametrize(("body", "why"), [
    ("echo '4242, python train.py'", "1 process(es) on its GPUs"),
    ("echo 'NVIDIA-SMI has failed' >&2; exit 9", "exit 9"),
    ("sleep 30", "timed out"),
])
def test_a_busy_or_unknown_host_is_never_tested(tmp_path: Path, body: str, why: str) -> None:
    marker = tmp_path / "ran"
    ran = site([script(tmp_path, "smi", body)]).run("n1", ["touch", str(marker)], 30,
                                                    Purpose.SWEEP)
    assert why in ran.refused and ran.exit_code is None
    assert not marker.exists()


def test_a_busy_check_that_cannot_start_refuses(tmp_path: Path) -> None:
    ran = site([str(tmp_path / "no-such-smi")]).run("n1", ["true"], 30, Purpose.GATE)
    assert "cannot tell whether n1 is busy" in ran.refused


def test_another_node_is_not_this_sites(tmp_path: Path) -> None:
    ran = site([script(tmp_path, "smi", "exit 0")]).run("n2", ["true"], 30, Purpose.GATE)
    assert "runs on n1 only" in ran.refused and not ran.steps


def test_a_run_past_its_time_keeps_its_output(tmp_path: Path) -> None:
    ran = site([script(tmp_path, "smi", "exit 0")]).run(
        "n1", [script(tmp_path, "burn", "echo 'GPU 0: OK'; sleep 30")], 1, Purpose.MANUAL)
    assert ran.timed_out and ran.exit_code is None and "GPU 0: OK" in ran.stdout
