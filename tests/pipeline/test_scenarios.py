"""Replays of hand-built traces through the real pipeline: the rounds are written as a gzip
line-protocol trace, read back by the ReplaySource and run through ingest, detectors, fusion,
alert machine, SQLite alert store and notifier, as `gpuhealth replay` runs them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from collectors.replay import ReplaySource
from collectors.trace import TraceReader, TraceWriter
from service.pipeline import Pipeline, build_pipeline
from service.runtime.runner import run_replay
from service.settings import Settings
from service.tick import TickResult
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0


def _replay(tmp_path: Path, rounds: Rounds, seconds: float,
            change: Callable[[int, float, Rounds], tuple[str, ...]] | None = None,
            step: float = 5.0) -> tuple[Pipeline, list[tuple[float, str, int]]]:
    with TraceWriter(tmp_path / "trace") as w:
        for k in range(int(seconds / step)):
            now = T0 + k * step
            missing = change(k, now - T0, rounds) if change else ()
            w.write(rounds.batch(now, missing=missing))
    pipe = build_pipeline(Settings(storage={"data_dir": tmp_path}))  # type: ignore[arg-type]
    fired: list[tuple[float, str, int]] = []

    def record(res: TickResult) -> None:
        fired.extend((res.at - T0, t.entity, t.new) for t in res.transitions if t.new > t.old)

    source = ReplaySource(TraceReader(tmp_path / "trace", step_s=step), speed=0)
    summary = run_replay(pipe, source, on_tick=record)
    assert summary.rounds == int(seconds / step) and summary.rejected == 0
    return pipe, fired


@pytest.mark.slow
def test_healthy_trace_raises_nothing(tmp_path: Path) -> None:
    pipe, fired = _replay(tmp_path, Rounds(), 2 * HOUR)
    assert [f for f in fired if f[2] >= 2] == []
    assert pipe.stats.samples_rejected == 0


@pytest.mark.slow
def test_hbm_degradation_is_flagged_before_the_uncorrectable_error(tmp_path: Path) -> None:
    gpu = "n1:gpu5"

    def degrade(k: int, t: float, r: Rounds) -> tuple[str, ...]:
        if t >= 1.25 * HOUR and k % (360 if t < 4 * HOUR else 120) == 0:  # bursts, then faster
            r.add(gpu, "ecc_sbe_volatile", 60)
            r.add(gpu, "ecc_sbe_aggregate", 60)
        if t == 4.5 * HOUR:
            r.add(gpu, "remapped_rows_correctable", 1)
        if t == 6 * HOUR:
            r.add(gpu, "ecc_dbe_volatile", 1)
        return ()

    pipe, fired = _replay(tmp_path, Rounds(), 6.2 * HOUR, degrade)
    before = [f for f in fired if f[1] == gpu and f[0] < 6 * HOUR]
    assert any(level >= 2 for _, _, level in before), fired
    assert all(f[1] == gpu for f in fired), fired
    alert = pipe.alerts.find(entity=gpu)[0]
    assert alert.level == 3 and alert.explanation[0]["rule"] == "dbe"


def test_double_bit_error_and_remap_failure_page_at_once(tmp_path: Path) -> None:
    def hit(k: int, t: float, r: Rounds) -> tuple[str, ...]:
        if k == 100:
            r.add("n0:gpu1", "ecc_dbe_volatile", 1)
            r.set("n1:gpu2", "remapped_rows_failure", 1)
        return ()

    _, fired = _replay(tmp_path, Rounds(), 600, hit)
    assert sorted(fired) == [(500, "n0:gpu1", 3), (500, "n1:gpu2", 3)]


@pytest.mark.slow
def test_counter_reset_causes_no_spike(tmp_path: Path) -> None:
    def reload(k: int, t: float, r: Rounds) -> tuple[str, ...]:
        if k % 12 == 0:
            for g in range(8):  # a healthy trickle of correctable errors...
                r.add(f"n0:gpu{g}", "ecc_sbe_volatile", 1)
        if k == 300:  # ...then a driver reload zeroes the volatile counters of node n0
            for g in range(8):
                r.set(f"n0:gpu{g}", "ecc_sbe_volatile", 0)
                r.set(f"n0:gpu{g}:nvlink0", "nvlink_crc_flit", 0)
        return ()

    rounds = Rounds()
    for g in range(8):  # large counts from a long uptime, so a naive delta would spike
        rounds.set(f"n0:gpu{g}", "ecc_sbe_volatile", 5000)
        rounds.set(f"n0:gpu{g}:nvlink0", "nvlink_crc_flit", 9000)
    pipe, fired = _replay(tmp_path, rounds, 1.5 * HOUR, reload)
    assert fired == []
    assert pipe.stats.counter_resets >= 16


@pytest.mark.slow
def test_telemetry_gap_causes_no_alert(tmp_path: Path) -> None:
    def gap(k: int, t: float, r: Rounds) -> tuple[str, ...]:
        for g in range(8):
            r.add(f"n0:gpu{g}", "ecc_sbe_volatile", 0.1)  # counters keep counting in the gap
        if 0.5 * HOUR <= t < 0.7 * HOUR:
            return (*tuple(f"n0:gpu{g}" for g in range(8)), "n0:mlx5_0:1")
        return ()

    _, fired = _replay(tmp_path, Rounds(), 1.5 * HOUR, gap)
    assert fired == []


@pytest.mark.slow
def test_sustained_hot_hbm_is_explained_and_adds_to_other_memory_signals(tmp_path: Path) -> None:
    gpu = "n0:gpu3"

    def hot(k: int, t: float, r: Rounds) -> tuple[str, ...]:
        if k == 0:  # the whole node runs hot, so peers see nothing odd
            for g in range(8):
                r.set(f"n0:gpu{g}", "mem_temp", 88.0)
        if t == 3.5 * HOUR:
            r.set(gpu, "remapped_rows_pending", 1)
        return ()

    pipe, fired = _replay(tmp_path, Rounds(), 3.6 * HOUR, hot)
    risk = pipe.risk.entity(gpu) if pipe.risk else None
    assert risk is not None and {s.rule for s in risk.signals} == {
        "hbm_temp_sustained", "remap_pending"}
    # Neither is an alert alone; together they are worth a record.
    assert fired == [(3.5 * HOUR, gpu, 1)]
