"""Warm start: after a restart, replay recent history from the store through ingest and the
detectors, so the window store has its rollups back and detector state (sustained-duration
timers, baselines) continues where it stopped. Sinks, alerts and notifications are left out:
the history is already stored, and open alerts were restored from the alert store."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from collectors.frames import Batch
from service.pipeline import Pipeline

if TYPE_CHECKING:
    from service.history.influx.client import InfluxClient

log = logging.getLogger(__name__)


class HistoryRounds(Protocol):
    """Stored samples as rounds: one Batch per `step_s` time bucket, in time order."""

    def rounds(self, start: float, end: float, step_s: float) -> Iterator[tuple[float, Batch]]:
        ...


@dataclass(slots=True)
class WarmStats:
    rounds: int = 0
    samples: int = 0
    rejected: int = 0
    ticks: int = 0
    seconds: float = 0.0
    first: float | None = None
    last: float | None = None


def warm_start(pipeline: Pipeline, history: HistoryRounds, now: float, lookback_s: float,
               tick_s: float, *, score: bool = True) -> WarmStats:
    """Ingest [now - lookback_s, now) round by round and score every `tick_s` of data time,
    as the live service did. Returns what was replayed. `score=False`: windows only (nodes
    added to a store that already scores others live: scoring at past times would move its
    detectors' clocks back)."""
    st = WarmStats()
    t0 = time.perf_counter()
    step = pipeline.settings.window.step_s
    next_tick: float | None = None
    for at, batch in history.rounds(now - lookback_s, now, step):
        with pipeline.lock:
            res = pipeline.ingestor.ingest(batch, now)
            pipeline.fleet.history.note(res.clean, step)  # a replayed history vouches
            st.rounds += 1
            st.samples += res.accepted
            st.rejected += res.rejected
            st.first = at if st.first is None else st.first
            st.last = at
            if score and (next_tick is None or at >= next_tick):
                pipeline.scorer.score(at)  # detectors only: no alert machine, no notifications
                st.ticks += 1
                next_tick = at + tick_s
    st.seconds = time.perf_counter() - t0
    if st.rounds:
        log.info("warm start: %d rounds (%d samples, %d refused) of the last %.0f s replayed "
                 "into the detectors in %.1f s", st.rounds, st.samples, st.rejected, lookback_s,
                 st.seconds)
    return st


def warm_start_from_settings(pipeline: Pipeline, now: float) -> WarmStats | None:
    """The warm start the settings ask for: from InfluxDB when one is configured (SQLite
    history is not replayed: the embedded default keeps detector state only in memory)."""
    s = pipeline.settings.storage
    if s.warm_start_s <= 0 or not s.influxdb.url or not pipeline.owns_store:
        return None
    from service.history.influx.client import InfluxClient, InfluxError
    from service.history.influx.rounds import InfluxRounds

    client = InfluxClient(s.influxdb)
    try:
        hosts = _owned_hosts(pipeline, client)
        if hosts is not None and not hosts:
            log.info("warm start: InfluxDB holds no node this shard owns")
            return None
        return warm_start(pipeline, InfluxRounds(client, s.influxdb.cluster, hosts=hosts), now,
                          s.warm_start_s, s.warm_start_tick_s)
    except InfluxError as exc:
        # A store that is down must not keep the service from starting: it starts cold.
        log.warning("warm start skipped, InfluxDB unreadable: %s", exc)
        return None
    finally:
        client.close()


def _owned_hosts(pipeline: Pipeline, client: InfluxClient) -> list[str] | None:
    """On a shard of a static map (`cluster.shards`), the stored nodes it owns: the others'
    history is theirs to replay (a shard scoring another's nodes would alert on them twice).
    None: one process owns every node."""
    from service.cluster.shard_map import ShardMap
    from service.history.influx.rounds import stored_hosts

    smap = ShardMap.from_settings(pipeline.settings.cluster)
    if smap is None:
        return None
    return sorted(h for h in stored_hosts(client, pipeline.settings.storage.influxdb.cluster)
                  if smap.is_local(h))
