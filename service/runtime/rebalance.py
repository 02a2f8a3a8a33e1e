"""Rebalancing's warm start: when the shard map gives this shard nodes another shard owned
(service.cluster.members), their recent history is replayed from InfluxDB into the window
store before the new map is used, so they are scored on warm windows from the first tick.

The gained nodes are those whose owner changed to us among every node InfluxDB holds samples
of and every node with an open alert in the shared state: nodes that never reported are not
there to warm. Without InfluxDB the nodes start cold (and a log line says so). The pipeline
itself forgets the nodes it lost and its writer restores the gained nodes' open alerts
(service.cluster.replica: Replica.rebalance, Replica.claim)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from collectors.catalog import Scope
from service.cluster.shard_map import ShardMap, local_in
from service.pipeline import Pipeline
from service.runtime.warm import WarmStats, warm_start

log = logging.getLogger(__name__)


class WarmGained:
    """The map-change callback (Membership.on_change) that warm-starts gained nodes."""

    def __init__(self, pipeline: Pipeline, clock: Callable[[], float] = time.time) -> None:
        self.pipeline, self.clock = pipeline, clock
        self.last: WarmStats | None = None  # the newest warm start's figures

    def __call__(self, old: ShardMap | None, new: ShardMap | None) -> None:
        p = self.pipeline
        if new is None or not p.owns_store:
            return
        s = p.settings.storage
        known = {a.node for a in p.alerts.open_alerts() if a.node != "*"}
        client = None
        if s.influxdb.url and s.warm_start_s > 0:
            from service.history.influx.client import InfluxClient, InfluxError
            from service.history.influx.rounds import InfluxRounds, stored_hosts

            client = InfluxClient(s.influxdb)
            try:
                known |= stored_hosts(client, s.influxdb.cluster)
                gained = sorted(h for h in known if local_in(new, h) and not local_in(old, h))
                if not gained:
                    return
                # A store that scores other nodes live keeps only its raw window for late
                # points (older ones cannot be placed); an empty one replays like a start.
                fresh = not any(len(w) for w in p.store.scopes.values())
                gpu = p.store[Scope.GPU]
                lookback = s.warm_start_s if fresh else min(
                    s.warm_start_s, gpu.raw_length * gpu.step_s)
                self.last = warm_start(p, InfluxRounds(client, s.influxdb.cluster,
                                                       hosts=gained), self.clock(), lookback,
                                       s.warm_start_tick_s, score=fresh)
                log.warning("shard map: %d nodes gained (%s%s), warm-started from InfluxDB: "
                            "%d rounds, %d samples of the last %.0f s", len(gained),
                            ", ".join(gained[:5]), " ..." if len(gained) > 5 else "",
                            self.last.rounds, self.last.samples, lookback)
            except InfluxError as exc:
                log.warning("shard map: gained nodes start cold, InfluxDB unreadable: %s", exc)
            finally:
                client.close()
            return
        gained = sorted(h for h in known if local_in(new, h) and not local_in(old, h))
        if gained:
            log.warning("shard map: %d nodes gained (%s%s) start cold: no InfluxDB is "
                        "configured (storage.influxdb.url, storage.warm_start_s) to warm-start "
                        "them from",
                        len(gained), ", ".join(gained[:5]), " ..." if len(gained) > 5 else "")


def follow_membership(pipeline: Pipeline, clock: Callable[[], float] = time.time
                      ) -> WarmGained | None:
    """Warm-start gained nodes at each map change (live membership only)."""
    if pipeline.members is None:
        return None
    warm = WarmGained(pipeline, clock)
    pipeline.members.on_change.append(warm)
    return warm
