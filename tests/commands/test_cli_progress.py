"""Progress of simulate, replay and evaluate: a tqdm bar on a terminal, a plain line every
EVERY_S seconds otherwise, always on stderr, so that `--json` output stays parseable."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from collectors.trace import TraceWriter
from service.commands import progress
from service.commands.cli import main
from service.commands.progress import Progress
from tests.support.fleet import STEP, T0, Fleet


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_every_period_with_percentage_and_what_is_left() -> None:
    clock, err = _Clock(), io.StringIO()
    bar = Progress("simulate ci", 24, "h", stream=err, every_s=10, clock=clock)
    bar.update(1)
    assert err.getvalue() == ""  # nothing before the first period is up
    clock.now += 12
    bar.update(6, "1,000 lines")
    clock.now += 3
    bar.update(7)  # within the period: no line
    clock.now += 30
    bar.update(18)
    bar.close()
    assert err.getvalue().splitlines() == [
        "simulate ci: 25% (6/24 h) after 12 s, about 36 s left; 1,000 lines",
        "simulate ci: 75% (18/24 h) after 45 s, about 15 s left",
        "simulate ci: done after 45 s (18/24 h)",
    ]


def test_no_total_shows_the_count_and_a_short_run_stays_quiet() -> None:
    clock, err = _Clock(), io.StringIO()
    with Progress("replay t", unit="rounds", stream=err, every_s=10, clock=clock) as bar:
        clock.now += 11
        bar.update(1500, "at 2025-01-01T03:00:00Z")
    assert err.getvalue().splitlines() == [
        "replay t: 1,500 rounds after 11 s; at 2025-01-01T03:00:00Z",
        "replay t: done after 11 s (1,500 rounds); at 2025-01-01T03:00:00Z"]
    quiet = io.StringIO()
    with Progress("replay t", stream=quiet, every_s=10, clock=_Clock()) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""


def test_a_terminal_gets_a_bar_and_lines_written_beside_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    err, out = io.StringIO(), io.StringIO()
    with Progress("evaluate ci", 10, "h", stream=err, tty=True) as bar:
        bar.update(5)
        bar.write("level 0 -> 3  n001:gpu3", file=out)
    drawn = err.getvalue()
    assert drawn.startswith("\revaluate ci:") and "%|" in drawn  # a bar, redrawn in place
    assert drawn.endswith("\r") and "\n" not in drawn  # and cleared when done
    assert out.getvalue() == "level 0 -> 3  n001:gpu3\n"
    assert capsys.readouterr().out == ""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    fleet = Fleet({"n001": 2})
    out = tmp_path / "trace"
    with TraceWriter(out) as w:
        for k in range(6):
            w.write(fleet.batch(T0 + k * STEP))
    return out


@pytest.fixture
def every_update(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "EVERY_S", 0.0)  # a line at each update, no waiting


def _json_and_progress(capsys: pytest.CaptureFixture[str], prefix: str) -> tuple[object, str]:
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.startswith(prefix)]
    assert lines and lines[-1].startswith(f"{prefix} done after"), err
    return json.loads(out), err


@pytest.mark.usefixtures("every_update")
def test_replay_json_stays_parseable_with_progress_on_stderr(
        trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(trace), "--json"]) == 0
    summary, err = _json_and_progress(capsys, "replay trace:")
    assert isinstance(summary, dict) and summary["rounds"] == 6
    assert "replay trace: 6 rounds after" in err


@pytest.mark.usefixtures("every_update")
def test_simulate_reports_simulated_hours(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "demo", str(tmp_path / "t"), "--days", "0.01", "--plain"]) == 0
    summary, err = _json_and_progress(capsys, "simulate demo:")
    assert isinstance(summary, dict) and summary["lines"] > 0
    assert "simulate demo: 100% (0.2/0.2 h)" in err


@pytest.mark.usefixtures("every_update")
def test_evaluate_json_stays_parseable_with_progress_on_stderr(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["evaluate", "--trace", str(trace), "--detectors", "ours", "--json",
               "--out", str(tmp_path / "eval")])
    assert rc == 0
    result, err = _json_and_progress(capsys, "evaluate trace:")
    assert isinstance(result, dict) and result["scenario"] == "trace"
    assert "evaluate trace: 6 rounds after" in err
