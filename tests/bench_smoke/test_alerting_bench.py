"""bench.alerting still runs end to end at a tiny size (no timing is checked): the evaluation,
the level-3 fault reaching the command hook, and every message reaching its loopback server."""

from __future__ import annotations

import json

import pytest

from bench.alerting import main


@pytest.mark.slow  # a few seconds: three loopback servers and a small pipeline
def test_alerting_bench_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "--gpus", "64", "--links", "2", "--ports", "2", "--ticks", "5",
                 "--rem-gpus", "96", "--trials", "1", "--warmup-rounds", "2",
                 "--alerts", "12", "--nodes", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    ev = out["evaluation"]
    assert ev["entities"] == 64 + 64 * 2 + 8 * 2 and ev["ticks"] == 5
    assert ev["flush"]["messages_when_due"] == ev["flush"]["groups"] > 0
    trial = out["remediation"]["trials"][0]
    assert trial["level3_in_tick"] and trial["hook_called"] and trial["hook_ok"], trial
    for n in out["notifications"]:
        assert n["messages"] == n["delivered"] == n["received_by_server"] == 4, n
    assert out["dirty_flush"][0]["alerts"] == 12
