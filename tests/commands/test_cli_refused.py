"""The `rejected` count of the demo and of a replay, explained: refused samples grouped by
reason with the nodes and times they hit, and the injected trap under way there."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import pytest

from collectors.frames import Rejection
from service.assembly import Wiring
from service.commands.demo import run_demo
from service.commands.refusals import RefusalTally, reason_kind
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.ingest import IngestResult
from tests.support.fleet import STEP, T0, Fleet


def _clock(t: float) -> str:
    return f"+{(t - T0) / 60:.0f}min"


def _refusing_pipeline(settings: Settings) -> tuple[Pipeline, RefusalTally]:
    pipe = build_pipeline(settings, Wiring.offline(sinks=(), influxdb=False))
    tally = RefusalTally()
    pipe.sinks.append(tally)
    pipe.observers.append(tally)
    return pipe, tally


def test_refused_samples_are_grouped_by_reason_node_and_time(settings: Settings) -> None:
    pipe, tally = _refusing_pipeline(settings)
    fleet = Fleet({"n001": 2, "n002": 2})
    try:
        for k in range(3):
            now = T0 + k * STEP
            batch = fleet.batch(now)
            if k == 2:  # n002's clock jumps an hour ahead: its rows are from the future
                gpu = next(iter(batch.frames.values()))
                rows = [i for i, e in enumerate(gpu.entities) if e.node == "n002"]
                gpu.ts[np.isin(gpu.rows, rows)] = now + 3600
            pipe.process(batch, now)
    finally:
        pipe.close()
    assert tally.samples == pipe.stats.samples_rejected > 0
    [group] = tally.as_list()
    assert group["reason"] == "timestamp more than 300s in the future"
    assert group["nodes"] == ["n002"] and group["first"] == group["last"] == T0 + 2 * STEP
    lines = tally.lines(_clock)
    assert lines == [f"{tally.samples:,} samples refused:",
                     f"  {tally.samples:,}: timestamp more than 300s in the future on n002 at "
                     f"+0min"]
    # A node-wide trap of a simulated trace under way there is named; a device trap is not.
    labels = [{"kind": "benign", "trap": "ib_corruption", "scope": "ib_port", "node": "n002",
               "entity": "n002:mlx5_0:1", "start": T0 - 60, "end": T0 + 60},
              {"kind": "benign", "trap": "clock_skew", "scope": "node", "node": "n002",
               "entity": "n002", "start": T0 - 60, "end": T0 + 2 * STEP}]
    line = tally.lines(_clock, labels, STEP)[1]
    assert "during the injected clock_skew on n002 (+-1min-+0min)" in line
    assert "its clock ran a sample ahead" in line and "ib_corruption" not in line


def test_a_round_with_several_reasons_splits_its_count_and_keeps_the_total() -> None:
    tally = RefusalTally()
    res = IngestResult(rejected=10, rejections=[
        Rejection("duplicate timestamp for this entity: ts=1.0", entity="n001:gpu0"),
        Rejection("duplicate timestamp for this entity: ts=2.0", entity="n001:gpu1"),
        Rejection("duplicate timestamp for this entity: 40 more rows"),
        Rejection("counter ecc_sbe is negative: -1", line=3)])
    tally.write(res)
    tally.write(IngestResult(rejected=2))  # counted, though no reason was kept
    got = {g["reason"]: g["samples"] for g in tally.as_list()}
    assert got == {"duplicate timestamp for this entity": 7,
                   "counter ecc_sbe is negative: -1": 3, "reason not recorded": 2}
    assert tally.samples == 12
    assert reason_kind("out-of-order timestamp: 7 more values") == "out-of-order timestamp"


@pytest.mark.slow
def test_the_demo_says_what_it_refused(tmp_path: Path) -> None:
    out = io.StringIO()
    args = argparse.Namespace(speed=0.0, seed=0, port=0, data_dir=tmp_path / "demo",
                              serve=False, json=False)
    summary = run_demo(args, out=out)
    why = summary["rejected_why"]
    assert summary["rejected"] == sum(g["samples"] for g in why)
    text = out.getvalue()
    if summary["rejected"]:
        assert f"{summary['rejected']:,} samples refused:" in text
        assert all(g["reason"] in text for g in why)
    for g in why:  # the demo injects one node clock skew: its end re-sends a timestamp
        if g["reason"].startswith("duplicate timestamp"):
            assert g["nodes"] == ["n0002"]
            assert "during the injected clock_skew on n0002" in text
