"""The soak's flatness checks read the service's own counters: the tick time by phase from
`/metrics`, so a slow last quarter says where the time went (no stack needed)."""

from __future__ import annotations

from bench.soak_probe import Snapshot, parse_metrics
from bench.soak_verdict import flat

METRICS = """\
# TYPE gpuhealth_score_tick_seconds histogram
gpuhealth_score_tick_seconds_sum 2.0
gpuhealth_score_tick_seconds_count 10.0
# TYPE gpuhealth_score_tick_phase_seconds counter
gpuhealth_score_tick_phase_seconds_total{phase="lock"} 1.5
gpuhealth_score_tick_phase_seconds_total{phase="score"} 0.5
"""


def snap(at: float, count: float, total: float, lock: float, score: float) -> Snapshot:
    return Snapshot(at, 7, True, True, (), True, ticks=count, tick_sum=total, tick_count=count,
                    rss_bytes=100e6, phases=(("lock", lock), ("score", score)))


def test_parse_metrics_reads_the_tick_phases() -> None:
    got = parse_metrics(METRICS)
    assert got["tick_sum"] == 2.0 and got["tick_count"] == 10.0
    assert got["phase:lock"] == 1.5 and got["phase:score"] == 0.5


def test_a_slower_last_quarter_names_its_phase() -> None:
    # First quarter: 10 ms a tick, all scoring; last: 200 ms, of which 190 waiting for the lock.
    snaps = [snap(0, 0, 0.0, 0.0, 0.0), snap(20, 10, 0.1, 0.0, 0.1),
             snap(80, 100, 1.0, 0.0, 1.0), snap(100, 110, 3.0, 1.9, 1.1)]
    rss, tick, work = flat(snaps, 0.0, 100.0)
    assert rss.ok
    assert not tick.ok
    assert "lock 0.0 -> 190.0" in tick.detail and "score 10.0 -> 10.0" in tick.detail
    assert work.value == "0.0 -> 0.0 ms" and not work.judged


def test_alert_work_is_reported_beside_the_flatness_not_in_it() -> None:
    # The last quarter's ticks write and send alerts (90 ms a tick); scoring stays at 10 ms.
    snaps = [Snapshot(at, 7, True, True, (), True, ticks=n, tick_sum=t, tick_count=n,
                      rss_bytes=100e6, phases=(("notify", w), ("score", sc)))
             for at, n, t, w, sc in ((0, 0, 0.0, 0.0, 0.0), (20, 10, 0.1, 0.0, 0.1),
                                     (80, 100, 1.0, 0.0, 1.0), (100, 110, 2.0, 0.9, 1.1))]
    _, tick, work = flat(snaps, 0.0, 100.0)
    assert tick.ok and tick.value == "1.00"
    assert work.value == "0.0 -> 90.0 ms"
