"""bench.agent_footprint runs: its memory half, from the source tree with the service's
dependencies blocked, over a few quick rounds (no install, no figures asserted: the bench reports
them, docs/design.md records them)."""

from __future__ import annotations

import json

import pytest

from bench.agent_footprint import main


def test_the_memory_half_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--no-install", "--rounds", "3", "--interval", "0.2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    agent = report["agent"]
    assert agent["rounds"] >= 3 and agent["pushed_kb"] > 0
    assert 0 < agent["rss_mb"] <= agent["peak_rss_mb"]
    assert "segments sent" in agent["agent_said"]
    assert "install" not in report


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--no-install", "--rounds", "0"])
    assert exc.value.code == 2
