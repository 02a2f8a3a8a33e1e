"""The agent reports each of its collectors every round as a `gpuhealth_collector` point."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

from collectors.agent.loop import Agent
from collectors.agent.spool import Spool
from collectors.base import CollectorStatus
from collectors.collector_status import CollectorReport, read_report, status_line
from collectors.frames import Batch
from collectors.lineprotocol import parse
from tests.collectors.agent.test_agent import RoundsCollector

WALL_NS = 1_750_000_000_123_000_000


class DownCollector:
    """A source that is not there: an empty batch and the reason, as collectors report it."""

    name = "nvidia-smi"

    def __init__(self) -> None:
        self.status = CollectorStatus()

    def collect(self) -> Batch:
        self.status = CollectorStatus(False, "nvidia-smi: not found\n(is the driver loaded?)")
        return Batch()


class Timer:
    """perf_counter stand-in: each collect() takes the next duration."""

    def __init__(self, durations: list[float]) -> None:
        self.ticks: Iterator[float] = iter(_cumulative(durations))

    def __call__(self) -> float:
        return next(self.ticks)


def _cumulative(durations: list[float]) -> list[float]:
    out, t = [], 100.0
    for d in durations:
        out += [t, t + d]
        t += d + 1.0
    return out


def test_every_collector_gets_a_status_point_per_round(tmp_path: Path) -> None:
    rounds = RoundsCollector()
    agent = Agent([rounds, DownCollector()], Spool(tmp_path / "spool"), None, host="node7",
                  timer=Timer([0.25, 0.5]), wall_ns=lambda: WALL_NS)
    lines = agent.lines()
    points, rejected = parse(lines)
    assert rejected == []
    status = [p for p in points if p.measurement == "gpuhealth_collector"]
    assert [read_report(p) for p in status] == [
        CollectorReport("node7", "rounds", True, 0.25, rounds.rounds.batch(0).samples, "",
                        WALL_NS / 1e9),
        CollectorReport("node7", "nvidia-smi", False, 0.5, 0,
                        "nvidia-smi: not found (is the driver loaded?)", WALL_NS / 1e9),
    ]
    assert status[0].fields["up"] == 1 and type(status[0].fields["up"]) is int
    assert status[0].fields["samples"] > 0
    # Each collector's status follows its samples; the one that is down has only its status.
    assert lines[-2].startswith("gpuhealth_collector,collector=rounds,host=node7 up=1i,")
    assert lines[-1].startswith("gpuhealth_collector,collector=nvidia-smi,host=node7 up=0i,")
    assert all(not ln.startswith("gpuhealth_collector") for ln in lines[:-2])


def test_the_host_defaults_to_the_collectors_host(tmp_path: Path) -> None:
    c = DownCollector()
    c.host = "dgx-3"  # type: ignore[attr-defined]  # as the real collectors carry it
    agent = Agent([c], Spool(tmp_path / "spool"), None, wall_ns=lambda: WALL_NS)
    [line] = agent.lines()
    assert line.startswith("gpuhealth_collector,collector=nvidia-smi,host=dgx-3 up=0i,")


def test_a_round_spools_the_status_even_without_samples(tmp_path: Path) -> None:
    agent = Agent([DownCollector()], Spool(tmp_path / "spool"), None, host="n1")
    assert agent.collect_round() == 1
    seg = agent.spool.oldest()
    assert seg is not None and gzip.decompress(seg[1]).startswith(b"gpuhealth_collector,")


def test_status_line_escapes_and_round_trips() -> None:
    line = status_line("n 1", "dcgm,exporter", False, 1.5, 0, 'bad "token"', WALL_NS)
    [p] = parse(line).points
    assert read_report(p) == CollectorReport("n 1", "dcgm,exporter", False, 1.5, 0,
                                             'bad "token"', WALL_NS / 1e9)
