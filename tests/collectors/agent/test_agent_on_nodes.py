"""The agent on real nodes (issue 33): `--once` says which sources it found, skipped (and why)
or failed; a replay prints its progress; the kernel-log source says what it lacks where
/dev/kmsg cannot be opened; the container and the systemd unit give it what it needs for
that (the device and CAP_SYSLOG)."""

from __future__ import annotations

import configparser
import errno
import io
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.agent_binary import fake_smi
from bench.agent_node import Sink
from collectors.agent.loop import Agent
from collectors.agent.report import NOT_FOUND, Progress, survey
from collectors.agent.spool import Spool
from collectors.kernel_log import sources as kernel_sources
from collectors.kernel_log.collector import KernelLogCollector
from collectors.registry import SOURCES
from service.commands import cli
from service.commands.cli import main

REPO = Path(__file__).resolve().parents[3]
NS = 1_000_000_000


@pytest.fixture
def smi_on_path(tmp_path: Path) -> Iterator[Path]:
    bin_dir = fake_smi(tmp_path / "node")
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{old}"
    yield bin_dir
    os.environ["PATH"] = old


def test_once_lists_the_sources_found_skipped_and_read(
        smi_on_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found, skipped = survey()
    rc = main(["agent", "--once", "--stdout", "--host", "n1", "--spool", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "gpuhealth agent: source nvidia-smi: found" in err
    # every other source is named, found or skipped with why
    for name in SOURCES:
        assert f"source {name}: found" in err or f"source {name}: skipped: " in err, name
    for name, why in skipped:
        assert f"source {name}: skipped: {why}" in err
    assert "source nvidia_smi is down" not in err  # read, with its unreadable GPUs as data
    assert set(found) | {n for n, _ in skipped} == set(SOURCES)


def test_every_source_has_a_reason_to_be_skipped() -> None:
    assert set(NOT_FOUND) == set(SOURCES)


def test_a_source_that_fails_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    broken = tmp_path / "bin" / "nvidia-smi"
    broken.parent.mkdir()
    broken.write_text('#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn\'t communicate '
                      'with the NVIDIA driver." >&2\nexit 9\n')
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{broken.parent}{os.pathsep}{old}"
    try:
        rc = main(["agent", "--once", "--stdout", "--source", "nvidia-smi", "--host", "n1",
                   "--spool", str(tmp_path / "s")])
    finally:
        os.environ["PATH"] = old
    err = capsys.readouterr().err
    assert rc == 1
    assert "source nvidia_smi is down: " in err and "couldn't communicate" in err
    assert "source nvidia-smi: found" not in err  # named, not detected: no survey


def test_a_replay_prints_its_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    trace = tmp_path / "trace.lp"
    t0 = 1_700_000_000
    trace.write_text("".join(f"gpu,host=n1,gpu=0 gpu_temp={40 + k} {(t0 + 5 * k) * NS}\n"
                             for k in range(6)))
    with Sink() as sink:
        assert main(["agent", "--replay", str(trace), "--speed", "0", "--progress-s", "0",
                     "--url", sink.url, "--spool", str(tmp_path / "s")]) == 0
    assert sink.posts >= 1
    progress = [x for x in capsys.readouterr().err.splitlines()
                if x.startswith("agent: replay: ")]
    assert progress, "no progress line"
    assert "6 rounds" in progress[-1] or "7 rounds" in progress[-1]
    assert "segments sent" in progress[-1] and "left in the spool" in progress[-1]
    assert progress[-1].endswith("lines/s")


def test_progress_prints_once_per_interval(tmp_path: Path) -> None:
    now = [0.0]
    agent = Agent([], Spool(tmp_path / "s"), None, host="n1")
    out = io.StringIO()
    p = Progress(agent, out, every_s=10.0, clock=lambda: now[0])
    for t in (1.0, 5.0, 10.0, 12.0, 19.9, 20.0):
        now[0] = t
        p()
    assert len(out.getvalue().splitlines()) == 2  # at 10 s and at 20 s


def test_kmsg_without_the_capability_says_what_it_needs(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """Root here opens anything, so the kernel's refusal is stood in for: os.open raising
    EPERM, as open(2) does on /dev/kmsg with kernel.dmesg_restrict=1 and no CAP_SYSLOG."""
    def refuse(path: object, flags: int, *a: object) -> int:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(path))

    monkeypatch.setattr(kernel_sources.os, "open", refuse)
    c = KernelLogCollector.from_kmsg("n1", dev_root=tmp_path)
    c.collect()
    assert not c.status.up
    assert "kernel log unreadable" in c.status.reason and "CAP_SYSLOG" in c.status.reason


def test_the_container_agent_has_kmsg_and_cap_syslog() -> None:
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["node-agent"]
    assert "/dev/kmsg:/dev/kmsg" in spec["devices"]
    assert spec["cap_add"] == ["SYSLOG"]
    assert str(spec["user"]) == "0"  # Docker grants an added capability to root only
    assert "--cap-add SYSLOG" in (REPO / "service" / "Dockerfile").read_text()


UNIT = REPO / "collectors" / "agent" / "gpuhealth-agent.service"


def test_the_systemd_unit_runs_the_agent_with_cap_syslog() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    svc = unit["Service"]
    assert svc["AmbientCapabilities"] == svc["CapabilityBoundingSet"] == "CAP_SYSLOG"
    assert svc["User"] == "gpuhealth" and svc["Restart"] == "always"
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == "/usr/local/bin/gpuhealth-agent"  # the one-file binary's place
    # the binary's arguments are `gpuhealth agent`'s, and they parse
    args = cli.build_parser(["agent"]).parse_args(
        ["agent", *[a.replace("${GPUHEALTH_URL}", "http://svc:8080/write") for a in argv[1:]]])
    assert str(args.spool).startswith(svc["WorkingDirectory"])
    assert svc["StateDirectory"] == Path(svc["WorkingDirectory"]).name
    assert unit["Install"]["WantedBy"] == "multi-user.target"
