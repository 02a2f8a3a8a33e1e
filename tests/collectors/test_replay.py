"""ReplaySource: pacing against a fake clock, exhaustion, the Collector protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import Collector
from collectors.catalog import Scope
from collectors.replay import ReplaySource
from collectors.trace import TraceReader

T0 = 1_700_000_000
NS = 10**9


class FakeClock:
    """A monotonic clock that only moves when someone sleeps or the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def trace(tmp_path: Path, offsets: list[int]) -> Path:
    path = tmp_path / "t.lp"
    path.write_text("".join(f"gpu,host=n1,gpu=0 gpu_temp={40 + i} {(T0 + dt) * NS}\n"
                            for i, dt in enumerate(offsets)))
    return path


def replay(path: Path, speed: float | None, clock: FakeClock) -> ReplaySource:
    return ReplaySource(path, speed=speed, clock=clock, sleep=clock.sleep)


def temps(src: ReplaySource, n: int) -> list[float]:
    return [float(src.collect().frames[Scope.GPU].values[0, 0]) for _ in range(n)]


def test_real_time_replay_sleeps_out_each_step(tmp_path: Path) -> None:
    clock = FakeClock()
    src = replay(trace(tmp_path, [0, 5, 10, 30]), 1, clock)
    assert temps(src, 4) == [40.0, 41.0, 42.0, 43.0]
    assert clock.sleeps == [5.0, 5.0, 20.0]  # a gap in the trace is a gap in the replay


def test_ten_times_faster(tmp_path: Path) -> None:
    clock = FakeClock()
    src = replay(trace(tmp_path, [0, 5, 10, 15]), 10, clock)
    temps(src, 4)
    assert clock.sleeps == pytest.approx([0.5, 0.5, 0.5])


@pytest.mark.parametrize("speed", [None, 0])
def test_as_fast_as_possible_never_sleeps(tmp_path: Path, speed: float | None) -> None:
    clock = FakeClock()
    src = replay(trace(tmp_path, [0, 5, 10, 3600]), speed, clock)
    assert temps(src, 4) == [40.0, 41.0, 42.0, 43.0]
    assert clock.sleeps == []


def test_schedule_is_absolute_so_a_slow_caller_does_not_drift(tmp_path: Path) -> None:
    clock = FakeClock()
    src = replay(trace(tmp_path, [0, 5, 10, 15]), 1, clock)
    src.collect()
    clock.now += 3.0  # the caller spent 3 s on the first round
    src.collect()
    clock.now += 7.0  # and fell 2 s behind on the second: round 3 comes at once
    src.collect()
    src.collect()  # round 4 is still due 15 s after the first, not 5 s after round 3
    assert clock.sleeps == [2.0, 3.0]


def test_exhaustion_returns_empty_batches(tmp_path: Path) -> None:
    clock = FakeClock()
    src = replay(trace(tmp_path, [0, 5]), None, clock)
    assert src.collect().samples == 1
    assert src.collect().samples == 1
    assert not src.status.exhausted
    for _ in range(2):
        empty = src.collect()
        assert empty.frames == {} and len(empty.events) == 0 and empty.rejected == []
        assert src.status.exhausted and src.status.up
    assert src.rounds_replayed == 2


def test_rejections_reach_the_caller_and_the_source_stays_up(tmp_path: Path) -> None:
    path = tmp_path / "t.lp"
    path.write_text(f"gpu,host=n1,gpu=0 gpu_temp=1 {T0 * NS}\nbad line\n")
    src = ReplaySource(TraceReader(path), speed=None)
    batch = src.collect()
    assert [str(r) for r in batch.rejected] == [
        "line 2: t.lp: field 'line' has no '=' (missing field set?)"]
    assert src.status.up


def test_is_a_collector_and_checks_its_arguments(tmp_path: Path) -> None:
    src = ReplaySource(trace(tmp_path, [0]), name="replay-a")
    assert isinstance(src, Collector)
    assert src.name == "replay-a"
    with pytest.raises(ValueError, match="speed"):
        ReplaySource(trace(tmp_path, [0]), speed=-1)
    with pytest.raises(FileNotFoundError):
        ReplaySource(tmp_path / "missing")


# ---- rebasing onto the wall clock ------------------------------------------------------------

def test_rebased_replay_backfills_what_is_due_then_keeps_real_time(tmp_path: Path) -> None:
    clock = FakeClock()  # read as epoch seconds here
    start = clock.now - 10.0
    path = tmp_path / "t.lp"
    path.write_text("".join(f"gpu,host=n1,gpu=0 gpu_temp={40 + i} {(T0 + dt) * NS}\n"
                            for i, dt in enumerate([0, 5, 10, 15, 20]))
                    + f"xid,host=n1,gpu=0 code=79i {(T0 + 20) * NS}\n")
    src = ReplaySource(path, speed=1, clock=clock, sleep=clock.sleep, start_at=start)
    batches = [src.collect() for _ in range(5)]
    # Rounds stamped start, +5 and +10 (= now) are due at once; the next two wait their turn.
    assert clock.sleeps == [5.0, 5.0]
    assert [float(b.frames[Scope.GPU].ts[0]) for b in batches] == [
        start, start + 5, start + 10, start + 15, start + 20]
    assert batches[-1].events.ts == [start + 20]
    assert src.shift_s == start - T0


def test_rebase_in_the_past_as_fast_as_possible_never_sleeps(tmp_path: Path) -> None:
    clock = FakeClock()
    src = ReplaySource(trace(tmp_path, [0, 5, 10]), speed=None, clock=clock, sleep=clock.sleep,
                       start_at=clock.now - 3600)
    ts = [float(src.collect().frames[Scope.GPU].ts[0]) for _ in range(3)]
    assert clock.sleeps == [] and ts == [clock.now - 3600 + k for k in (0, 5, 10)]


def test_a_replayed_traces_gpu_identities_come_with_their_round_moved_with_it(
        tmp_path: Path) -> None:
    """A trace's gpu_info points (a recorded identity, one GPU's split over two rounds, and
    one in a round of no sample) reach the replay's rounds, their time rebased."""
    from collectors.identity import GpuIdentity

    clock = FakeClock()
    path = tmp_path / "t.lp"
    path.write_text(f"gpu,host=n1,gpu=0 gpu_temp=40 {T0 * NS}\n"
                    f'gpu_info,host=n1,gpu=0 uuid="GPU-a",serial="S1" {T0 * NS}\n'
                    f'gpu_info,host=n1,gpu=0 driver="550.54.15" {(T0 + 5) * NS}\n'
                    f"gpu,host=n1,gpu=0 gpu_temp=41 {(T0 + 5) * NS}\n"
                    f'gpu_info,host=n2,gpu=1 model="Tesla T4" {(T0 + 10) * NS}\n')
    src = ReplaySource(path, speed=None, clock=clock, sleep=clock.sleep,
                       start_at=clock.now)
    rounds = [src.collect() for _ in range(3)]
    assert [r.identity for r in rounds] == [
        {"n1:gpu0": GpuIdentity(uuid="GPU-a", serial="S1")},
        {"n1:gpu0": GpuIdentity(driver="550.54.15")},
        {"n2:gpu1": GpuIdentity(model="Tesla T4")}]
    assert [next(iter(r.identity.values())).at for r in rounds] == [
        clock.now, clock.now + 5, clock.now + 10]
    assert rounds[2].samples == 0
