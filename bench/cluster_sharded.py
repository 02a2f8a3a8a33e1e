"""bench.cluster's sharded scenario: shards with a static `cluster.shards` map on one PostgreSQL
schema and one InfluxDB; agents spread over them, each first pushing to the shard its index
names (so most are redirected once by a 307, then stay with the owner), a relay posting a body
of several shards' nodes to the first shard (split there and forwarded); one GPU fails on a
node of a shard that is not the leader, and must be paged by the leader and resolved.

Measured over a window of whole rounds, per shard: CPU seconds per 5-s round (/proc/<pid>/stat),
RSS, samples ingested, 307s answered and parts forwarded; for the whole: PostgreSQL
transactions and rows written per second (pg_stat_database) and InfluxDB samples per second.

Shards joining and leaving mid-run, with live membership in PostgreSQL, are
bench/cluster_rebalance.py (which builds on this run)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from bench.cluster_agents import Agents, Failure
from bench.cluster_failover import PAGE_TIMEOUT_S, pages_of, wait_for
from bench.cluster_stack import ClusterStack, Replica
from service.cluster.roles import LEADER
from service.cluster.shard_map import Shard, ShardMap

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ShardedResult:
    per_shard: dict[str, dict[str, float]] = field(default_factory=dict)
    window_s: float = 0.0
    rounds: int = 0
    pg_xact_per_s: float = 0.0
    pg_rows_per_s: float = 0.0
    influx_points_per_s: float = 0.0
    owners: dict[str, str] = field(default_factory=dict)  # host -> the shard owning it
    gpus_held: dict[str, int] = field(default_factory=dict)  # shard -> GPUs it scores
    failures: list[Failure] = field(default_factory=list)
    t0: float = 0.0
    t1: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"window_s": round(self.window_s, 1), "rounds": self.rounds,
                "pg_xact_per_s": round(self.pg_xact_per_s, 1),
                "pg_rows_per_s": round(self.pg_rows_per_s, 1),
                "influx_points_per_s": round(self.influx_points_per_s, 1),
                "shards": {k: {m: round(v, 3) for m, v in d.items()}
                           for k, d in self.per_shard.items()}}


class ShardedRun:
    def __init__(self, stack: ClusterStack, shards: int, nodes: int, gpus: int,
                 relay_nodes: int = 3) -> None:
        self.stack = stack
        self.ids = [chr(ord("a") + i) for i in range(shards)]
        self.hosts = [f"node{i:04d}" for i in range(nodes)]
        self.gpus = gpus
        self.relayed = self.hosts[:relay_nodes] if shards > 1 else []
        self.shards: list[Replica] = []
        self.map: ShardMap | None = None
        self.agents: Agents | None = None
        self.result = ShardedResult()
        self._failed_at = 0.0

    def start(self) -> None:
        self.shards = self.stack.scenario("bench-sharded",
                                          [(f"shard-{s}", s) for s in self.ids], sharded=True)
        self.map = ShardMap([Shard(r.shard_id, r.url) for r in self.shards], self.ids[0])
        self.result.owners = {h: self.map.owner(h).id for h in self.hosts}
        own = [h for h in self.hosts if h not in self.relayed]
        targets = {h: [f"{self.shards[i % len(self.shards)].url}/write"]
                   for i, h in enumerate(own)}
        relay = (f"{self.shards[0].url}/write", self.relayed) if self.relayed else None
        self.agents = Agents({h: self.gpus for h in self.hosts}, targets,
                             self.stack.timers.step_s, self.stack.root / "ledger-sharded.lp",
                             relay=relay)
        self.result.t0 = time.time()
        self.agents.start()

    def measure(self, rounds: int) -> None:
        """Let `rounds` whole rounds pass, reading every figure before and after them."""
        assert self.agents is not None
        step = self.stack.timers.step_s
        wait_for("the agents' first rounds", lambda: self.agents is not None
                 and self.agents.rounds >= 2, timeout_s=60)
        cpu0 = {r.shard_id: r.cpu_s() for r in self.shards}
        m0 = {r.shard_id: r.metrics() for r in self.shards}
        pg0, p0 = self.stack.pg_writes(), self.stack.influx_points()
        a0, t0 = self.agents.rounds, time.time()
        time.sleep(rounds * step)
        cpu1 = {r.shard_id: r.cpu_s() for r in self.shards}
        m1 = {r.shard_id: r.metrics() for r in self.shards}
        pg1, p1 = self.stack.pg_writes(), self.stack.influx_points()
        a1, t1 = self.agents.rounds, time.time()
        res = self.result
        res.window_s, res.rounds = t1 - t0, a1 - a0
        done = max(1, res.rounds)
        res.pg_xact_per_s = (pg1[0] - pg0[0]) / res.window_s
        res.pg_rows_per_s = (pg1[1] - pg0[1]) / res.window_s
        res.influx_points_per_s = (p1 - p0) / res.window_s
        foreign = self._forwarded_per_round()
        for r in self.shards:
            s, b, a = r.shard_id, m0[r.shard_id], m1[r.shard_id]
            res.per_shard[s] = {
                "cpu_s_per_round": (cpu1[s] - cpu0[s]) / done,
                "rss_mib": r.rss_bytes() / 2**20,
                "samples_ingested_per_round": (a.get("ingested", 0) - b.get("ingested", 0))
                / done,
                "redirects_307": a.get("write_307", 0),
                "parts_forwarded": foreign.get(s, 0) * self.agents.relay_pushes,
                "nodes_owned": sum(1 for o in res.owners.values() if o == s)}

    def _forwarded_per_round(self) -> dict[str, int]:
        """Parts the first shard forwards per relay body: one per other shard owning some."""
        if not self.relayed:
            return {}
        others = {self.result.owners[h] for h in self.relayed} - {self.ids[0]}
        return {self.ids[0]: len(others)}

    def fail(self) -> Failure:
        """A GPU of a node whose shard is not the leader's fails (it must be paged by the
        leader, from the alert its own shard's writer persisted)."""
        assert self.agents is not None
        held = self.stack.lease(LEADER)
        leader = next((r.shard_id for r in self.shards if held and r.holds(held[0])), "")
        host = next((h for h in self.hosts[::-1] if self.result.owners[h] != leader
                     and h not in self.relayed), self.hosts[-1])
        f = Failure(host, 0, "dbe")
        self.result.failures.append(f)
        self._failed_at = time.time()
        self.agents.inject(f)
        return f

    def recover(self, f: Failure) -> None:
        """Once `f` was paged: it recovers, and its resolve must come."""
        assert self.agents is not None
        t0 = self._failed_at
        wait_for(f"the page of {f.entity}", lambda: pages_of(self.stack, f.entity, "firing",
                                                             t0) > 0)
        self.agents.recover(f)
        wait_for(f"the resolve of {f.entity}", lambda: pages_of(
            self.stack, f.entity, "resolved", t0) > 0,
            timeout_s=PAGE_TIMEOUT_S + 3 * self.stack.timers.resolve_s)

    def stop(self) -> None:
        if self.agents is not None:
            self.agents.stop()
        self.result.t1 = time.time()
        for r in self.shards:
            self.result.gpus_held[r.shard_id] = int(r.metrics().get("gpus_held", -1))

