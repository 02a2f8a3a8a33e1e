"""bench.learning runs the whole loop at a tiny size against a real influxd: auto labels land,
`train --from-influx` trains from them alone, the model shadows the shipped one and both are
scored on the same fresh start (no figures asserted: docs/learning.md records a full run)."""

from __future__ import annotations

import json
import shutil

import pytest

from bench.learning import main

pytestmark = pytest.mark.skipif(shutil.which("influxd") is None,
                                reason="influxd is not installed (apt-get install influxdb)")


@pytest.mark.slow
def test_the_learning_loop_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "2", "--days", "3", "--train-days", "2", "--epochs", "1",
                 "--rate-multiplier", "600", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert sum(r["phase1"]["labels"].values()) > 0  # auto labels only: the training's truth
    learned = r["learned_from"]
    assert learned is not None and sum(sum(v.values()) for v in
                                       learned["label_counts"].values()) > 0
    board = r["compare"]
    assert board["challenger"]["added_by"] == "bench" and board["run"]["outcome"] == "running"
    assert set(board["scores"]) == {"active:fused", "active:model", "challenger:fused",
                                    "challenger:model"}
    assert board["run"]["node_days"] == pytest.approx(2.0, rel=0.05)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--days", "3", "--train-days", "3"])
    assert exc.value.code == 2


@pytest.mark.slow
def test_the_default_loop_runs_on_the_data_clock(capsys: pytest.CaptureFixture[str]) -> None:
    """The scheduled job, stepped on the data clock, says what it waits for; both streams
    are scored against the simulator's failures."""
    assert main(["--loop", "--nodes", "2", "--days", "3", "--rate-multiplier", "300",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"] and all("said" in s for s in out["job"])
    assert any("waiting for labels" in s["said"] or "trained" in s["said"]
               for s in out["job"])
    for stream in ("rules", "fused"):
        assert out[stream]["watch"]["failures"] >= 1
