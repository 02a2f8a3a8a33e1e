"""`gpuhealth agent --once`: exit 1 when no source could be read, naming each and why; exit 0
when at least one was, the others reported on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import Collector, CollectorStatus
from collectors.frames import Batch
from service.commands import agent as agent_cmd
from service.commands.cli import main
from tests.support.fleet import T0, Fleet


class _Source:
    """A collector that is up with one GPU's round, or down for a given reason."""

    def __init__(self, name: str, down: str = "") -> None:
        self.name = name
        self.status = CollectorStatus()
        self._down = down

    def collect(self) -> Batch:
        if self._down:
            self.status.up, self.status.reason = False, self._down
            return Batch()
        return Fleet({"n001": 1}, links=0, ports=0).batch(T0)


def _with(monkeypatch: pytest.MonkeyPatch, *sources: _Source) -> None:
    def collectors(args: object) -> list[Collector]:
        return list(sources)

    monkeypatch.setattr(agent_cmd, "_collectors", collectors)


MODES = {"stdout": ["--stdout"],
         # nothing listens on port 9: the round is spooled, the exit code is about the sources
         "push": ["--url", "http://127.0.0.1:9/write"]}


@pytest.mark.parametrize("mode", MODES)
def test_every_source_down_fails_and_says_why(tmp_path: Path, mode: str,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _with(monkeypatch, _Source("nvml", "NVML library not found"),
          _Source("infiniband", "no InfiniBand devices under /sys/class/infiniband"))
    rc = main(["agent", "--once", "--spool", str(tmp_path / "spool"), *MODES[mode]])
    err = capsys.readouterr().err
    assert rc == 1
    assert "gpuhealth agent: source nvml is down: NVML library not found" in err
    assert "source infiniband is down: no InfiniBand devices" in err
    assert "no source produced data (2 down)" in err and "Traceback" not in err


@pytest.mark.parametrize("mode", MODES)
def test_one_source_up_is_a_partial_success(tmp_path: Path, mode: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _with(monkeypatch, _Source("nvml", "NVML library not found"), _Source("nvidia_smi"))
    rc = main(["agent", "--once", "--spool", str(tmp_path / "spool"), *MODES[mode]])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "source nvml is down: NVML library not found" in err
    assert "1 of 2 sources read" in err and "nvidia_smi is down" not in err
    if mode == "stdout":
        assert any(line.startswith("gpu,") for line in out.splitlines())


def test_all_sources_up_says_nothing_about_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _with(monkeypatch, _Source("nvidia_smi"))
    assert main(["agent", "--once", "--stdout", "--spool", str(tmp_path / "s")]) == 0
    assert "gpuhealth agent:" not in capsys.readouterr().err
