"""Replays of a small trace written with TraceWriter: through run_replay, through the
`gpuhealth replay` command, and through the served app with a ReplaySource collector."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from collectors.replay import ReplaySource
from collectors.trace import TraceWriter
from service.api.app import create_app
from service.api.timefmt import parse_instant
from service.assembly import Wiring
from service.commands import cli
from service.pipeline import build_pipeline
from service.runtime.runner import run_replay
from service.runtime.scheduler import DataClock
from service.settings import ServiceSettings, Settings
from service.tick import TickResult
from tests.support.fleet import STEP, T0, Fleet

ROUNDS = 12
FAULT_AT = 6  # the round in which n001:gpu3 reports a double-bit ECC error


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    fleet = Fleet({"n001": 8, "n002": 8})
    out = tmp_path / "trace"
    with TraceWriter(out, rotate_rows=200) as w:  # several files, read back in name order
        for k in range(ROUNDS):
            if k == FAULT_AT:
                fleet.set("n001:gpu3", "ecc_dbe_volatile", 1)
            w.write(fleet.batch(T0 + k * STEP))
    assert len(list(out.iterdir())) > 1
    return out


def test_run_replay(settings: Settings, trace: Path) -> None:
    pipeline = build_pipeline(settings, Wiring.offline())
    ticks: list[TickResult] = []
    try:
        summary = run_replay(pipeline, ReplaySource(trace, speed=0), on_tick=ticks.append)
    finally:
        pipeline.close()
    assert summary.rounds == ROUNDS == len(ticks)
    assert [t.at for t in ticks] == [T0 + k * STEP for k in range(ROUNDS)]
    assert summary.rejected == 0 and summary.samples == pipeline.stats.samples_ingested
    assert summary.alerts_opened == 1 and summary.peak_level == {"n001:gpu3": 3}
    assert (summary.first_ts, summary.last_ts) == (T0, T0 + (ROUNDS - 1) * STEP)
    assert not summary.stopped and not summary.error and summary.wall_s >= 0


def test_run_replay_stops_when_asked(settings: Settings, trace: Path) -> None:
    pipeline = build_pipeline(settings, Wiring.offline())
    try:
        summary = run_replay(pipeline, ReplaySource(trace, speed=0),
                             stop=lambda: pipeline.stats.ticks >= 3)
    finally:
        pipeline.close()
    assert summary.stopped and summary.rounds == 3


def test_replay_command_json(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", str(trace), "--speed", "0", "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["rounds"] == ROUNDS and summary["transitions"] == 1
    assert summary["peak_level"] == {"n001:gpu3": 3}
    assert "level 0 -> 3  gpu n001:gpu3" in err  # progress goes beside the JSON, not into it


def test_replay_command_text(trace: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "replay.db"
    assert cli.main(["replay", str(trace), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "level 0 -> 3  gpu n001:gpu3  risk 1.00" in lines[0]
    assert lines[1].startswith(f"replayed {ROUNDS} rounds")
    assert "n001:gpu3: peak level 3" in out
    assert db.exists()


def test_replay_command_without_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", str(tmp_path / "nothing")]) == 2
    assert "no trace" in capsys.readouterr().err


def test_subcommand_registry_refuses_duplicates() -> None:
    assert {"serve", "replay"} <= set(cli.COMMANDS)
    with pytest.raises(ValueError, match="already registered"):
        cli.register("replay", lambda p: None, lambda a: 0)
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])


@pytest.mark.slow
def test_served_replay(settings: Settings, trace: Path) -> None:
    """What `gpuhealth serve --replay TRACE --speed 0` runs: the scheduler's collector is a
    ReplaySource and ticks follow the trace's clock."""
    settings = settings.model_copy(update={"service": ServiceSettings(
        collect_interval_s=0.01, score_interval_s=0.01)})
    app = create_app(settings, collectors=[ReplaySource(trace, speed=0)], clock=DataClock())
    with TestClient(app) as client:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ready = client.get("/readyz").json()
            if ready["collectors"]["replay"]["exhausted"] and ready["ready"]:
                nodes = client.get("/v1/nodes").json()["nodes"]
                if nodes and nodes[0]["risk"] == 1.0:
                    break
            time.sleep(0.02)
        alerts = client.get("/v1/alerts?level=3").json()["alerts"]
        assert [a["entity"] for a in alerts] == ["n001:gpu3"]
        # data time, not wall time
        assert parse_instant(alerts[0]["started_at"]) >= T0 + FAULT_AT * STEP
        assert client.get("/v1/nodes").json()["nodes"][0]["node"] == "n001"
