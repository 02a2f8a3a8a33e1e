"""bench.cluster's rebalancing scenario (`--add-shard`): shards with live membership in
PostgreSQL (`cluster.membership: postgres`, each advertising its own URL), the map the leader
publishes, and shards joining and leaving while the agents push.

1. Three shards a, b, c; agents push to a or b (never to the shard killed in step 5), are
   redirected by 307s to the owner and stay with it; the relay posts to a.
2. Two GPUs fail (double-bit ECC): one on a node that will move to the fourth shard, one on a
   node that stays; both paged. The figures of `rounds` rounds are read (before).
3. Shard d starts. Measured from its process starting: until the map's epoch names it, and
   until it ingested its first samples (redirected to it by the others). The nodes whose owner
   changed must all have gone to d (about a quarter); d must log that it warm-started them
   from InfluxDB; every node must then be on exactly one shard (each shard's own /v1/nodes,
   `X-Gpuhealth-Local: 1`, equals the nodes it owns under the map). The figures again (after).
   Both failures recover: the moved one must be resolved by its new owner, once, and never
   paged again (the verdict's duplicate and lost-resolve checks over every message).
4. A GPU of d fails and is paged; d is stopped cleanly (SIGTERM: it leaves the member list):
   its nodes go back to a, b, c; the failure recovers and is resolved by the new owner.
5. The same with SIGKILL on a shard that does not lead: its nodes must be elsewhere within
   lease_ttl + renew of the kill. It is restarted on its data directory (its spool still holds
   samples it acknowledged and had not yet sent to InfluxDB), rejoins, and the map settles.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.cluster_agents import Agents, Failure
from bench.cluster_failover import PAGE_TIMEOUT_S, pages_of, wait_for
from bench.cluster_sharded import ShardedRun
from bench.cluster_stack import ClusterStack, Replica
from service.cluster.roles import LEADER
from service.cluster.shard_map import Shard, ShardMap

log = logging.getLogger(__name__)
FLEET = "bench-rebalance"
WARM_LINE = "warm-started from InfluxDB"


@dataclass(slots=True)
class Move:
    """One change of the map: what started it, how long until the map showed it, which nodes
    moved where, and whether every node was then on exactly one shard."""

    what: str  # "join d", "leave d (SIGTERM)", "leave c (SIGKILL)", "rejoin c"
    epoch: int = 0
    map_s: float | None = None  # the event -> the published map shows it
    first_samples_s: float | None = None  # a join: -> the new shard ingested samples
    settled_s: float | None = None  # the event -> every node on exactly one shard
    moved: dict[str, str] = field(default_factory=dict)  # host -> its new owner
    nodes: int = 0

    def summary(self) -> dict[str, Any]:
        to = sorted(set(self.moved.values()))
        return {"what": self.what, "epoch": self.epoch, "map_s": _r(self.map_s),
                "first_samples_s": _r(self.first_samples_s), "settled_s": _r(self.settled_s),
                "moved": len(self.moved), "of": self.nodes, "to": to}


@dataclass(slots=True)
class RebalanceResult:
    moves: list[Move] = field(default_factory=list)
    before: dict[str, dict[str, float]] = field(default_factory=dict)
    after: dict[str, dict[str, float]] = field(default_factory=dict)
    warm_started: bool = False
    added: str = ""
    killed: str = ""
    limit_s: float = 0.0  # lease_ttl + renew: the bound on a killed shard's nodes moving

    def summary(self) -> dict[str, Any]:
        return {"moves": [m.summary() for m in self.moves], "before": self.before,
                "after": self.after, "warm_started": self.warm_started, "added": self.added,
                "killed": self.killed, "limit_s": self.limit_s}


class RebalanceRun(ShardedRun):
    def __init__(self, stack: ClusterStack, nodes: int, gpus: int) -> None:
        super().__init__(stack, 3, nodes, gpus)
        self.rebalance = RebalanceResult()
        self.rebalance.limit_s = stack.timers.lease_ttl_s + stack.timers.lease_renew_s
        self.urls: dict[str, str] = {}
        self._unsettled = ""

    # ---- the map ----------------------------------------------------------------------------
    def owners(self, ids: list[str]) -> dict[str, str]:
        smap = ShardMap([Shard(i, self.urls[i]) for i in ids], ids[0])
        return {h: smap.owner(h).id for h in self.hosts}

    def _map_is(self, ids: list[str]) -> bool:
        return sorted(self.stack.shard_map()[1]) == sorted(ids)

    def leader(self) -> str:
        held = self.stack.lease(LEADER)
        return next((r.shard_id for r in self.shards if held and r.holds(held[0])), "")

    def start(self) -> None:
        self.shards = self.stack.scenario(FLEET, [(f"shard-{s}", s) for s in self.ids],
                                          sharded=False, membership=True)
        self.urls = {r.shard_id: r.url for r in self.shards}
        if wait_for("the first map", lambda: self._map_is(self.ids)) is None:
            raise RuntimeError("the leader never published a map of shards a, b, c")
        wait_for("a leader", lambda: self.leader() != "")
        # The shard killed later is one that does not lead and is not the relay's (a).
        lead = self.leader()
        self.rebalance.killed = max(s for s in self.ids[1:] if s != lead)
        self.result.owners = self.owners(self.ids)
        pushed = [r for r in self.shards if r.shard_id != self.rebalance.killed]
        own = [h for h in self.hosts if h not in self.relayed]
        targets = {h: [f"{pushed[i % len(pushed)].url}/write"] for i, h in enumerate(own)}
        relay = (f"{self.shards[0].url}/write", self.relayed) if self.relayed else None
        self.agents = Agents({h: self.gpus for h in self.hosts}, targets,
                             self.stack.timers.step_s, self.stack.root / "ledger-rebalance.lp",
                             relay=relay)
        self.result.t0 = time.time()
        self.agents.start()

    # ---- the run ----------------------------------------------------------------------------
    def run(self, rounds: int) -> None:
        assert self.agents is not None
        wait_for("the agents' first rounds", lambda: self.agents is not None
                 and self.agents.rounds >= 2, timeout_s=60)
        new = chr(ord(self.ids[-1]) + 1)
        self.rebalance.added = new
        joined = self.stack.add(FLEET, f"shard-{new}", new)
        self.urls[new] = joined.url
        future = self.owners([*self.ids, new])
        moving = [h for h in self.hosts if future[h] != self.result.owners[h]
                  and h not in self.relayed]
        staying = [h for h in self.hosts if future[h] == self.result.owners[h]
                   and h not in self.relayed and self.result.owners[h] != self.leader()]
        hard = [Failure(moving[-1], 0, "dbe")] if moving else []
        hard += [Failure(staying[-1], 1 % self.gpus, "dbe")] if staying else []
        self._fail(hard)
        self.measure(rounds)
        self.rebalance.before = dict(self.result.per_shard)

        move = self._join(joined)
        self.rebalance.warm_started = WARM_LINE in joined.proc.log_file.read_text(errors="replace")
        self.measure(rounds)
        self.rebalance.after = dict(self.result.per_shard)
        self._recover(hard, move)

        # A shard leaves cleanly, one of its GPUs failing.
        self._leave(joined, kill=False)
        victim = next(r for r in self.shards if r.shard_id == self.rebalance.killed)
        self._leave(victim, kill=True)

    def _fail(self, failures: list[Failure]) -> float:
        assert self.agents is not None
        t0 = time.time()
        for f in failures:
            self.result.failures.append(f)
            self.agents.inject(f)
        for f in failures:
            wait_for(f"the page of {f.entity}",
                     lambda f=f: pages_of(self.stack, f.entity, "firing", t0) > 0)
        return t0

    def _recover(self, failures: list[Failure], since: Move) -> None:
        assert self.agents is not None
        t0 = time.time()
        for f in failures:
            self.agents.recover(f)
        for f in failures:
            wait_for(f"the resolve of {f.entity} (after {since.what})",
                     lambda f=f: pages_of(self.stack, f.entity, "resolved", t0) > 0,
                     timeout_s=PAGE_TIMEOUT_S + 3 * self.stack.timers.resolve_s)

    def _join(self, r: Replica) -> Move:
        move = Move(f"join {r.shard_id}", nodes=len(self.hosts))
        ids = sorted([*self.urls])
        before = self.ingested(r)
        t0 = time.time()
        r.start(wait=False)
        seen = wait_for(f"a map naming {r.shard_id}", lambda: self._map_is(ids))
        move.map_s = None if seen is None else seen - t0
        got = wait_for(f"{r.shard_id}'s first samples", lambda: self.ingested(r) > before)
        move.first_samples_s = None if got is None else got - t0
        r.wait_healthy()
        self.shards.append(r)
        self._moved(move, ids, t0)
        return move

    def _leave(self, r: Replica, kill: bool) -> None:
        """`r` leaves (SIGTERM or SIGKILL) with one of its nodes' GPUs failing."""
        assert self.agents is not None
        mine = [h for h in self.hosts if self.result.owners[h] == r.shard_id
                and h not in self.relayed]
        hard = [Failure(mine[0], 2 % self.gpus, "dbe")] if mine else []
        self._fail(hard)
        move = Move(f"leave {r.shard_id} ({'SIGKILL' if kill else 'SIGTERM'})",
                    nodes=len(self.hosts))
        ids = sorted(i for i in self.urls if i != r.shard_id and
                     any(s.shard_id == i for s in self.shards))
        t0 = time.time()
        if kill:
            r.proc.kill9()
        else:
            r.proc.stop(timeout_s=30)
        self.shards.remove(r)
        seen = wait_for(f"a map without {r.shard_id}", lambda: self._map_is(ids))
        move.map_s = None if seen is None else seen - t0
        self._moved(move, ids, t0)
        self._recover(hard, move)
        if kill:  # back on its data directory: its spool delivers what it acknowledged
            back = Move(f"rejoin {r.shard_id}", nodes=len(self.hosts))
            t1 = time.time()
            r.start()
            self.shards.append(r)
            self.shards.sort(key=lambda s: s.shard_id)
            ids = sorted([*ids, r.shard_id])
            seen = wait_for(f"a map naming {r.shard_id} again", lambda: self._map_is(ids))
            back.map_s = None if seen is None else seen - t1
            self._moved(back, ids, t1)

    def _moved(self, move: Move, ids: list[str], t0: float) -> None:
        """The map `ids` is in force: which nodes moved, then until every node is on exactly
        one shard (each live shard holding exactly the nodes it owns)."""
        move.epoch = self.stack.shard_map()[0]
        now = self.owners(ids)
        move.moved = {h: o for h, o in now.items() if self.result.owners[h] != o}
        self.result.owners = now
        settled = wait_for(f"every node on one shard after {move.what}", self._settled,
                           timeout_s=6 * self.stack.timers.step_s
                           + 3 * self.stack.timers.lease_renew_s)
        move.settled_s = None if settled is None else settled - t0
        if settled is None or settled - t0 > 3 * self.stack.timers.step_s:
            log.info("%s: last unsettled: %s", move.what, self._unsettled)
        self.rebalance.moves.append(move)
        log.info("%s: map epoch %d after %s s; %d of %d nodes moved to %s; settled after %s s",
                 move.what, move.epoch, _r(move.map_s), len(move.moved), move.nodes,
                 ", ".join(sorted(set(move.moved.values()))) or "-", _r(move.settled_s))

    def _settled(self) -> bool:
        for r in self.shards:
            want = {h for h, o in self.result.owners.items() if o == r.shard_id}
            try:
                held = local_nodes(r)
            except httpx.HTTPError as exc:
                self._unsettled = f"{r.shard_id}: {exc}"
                return False
            if held != want:
                self._unsettled = (f"{r.shard_id} holds {sorted(held - want)} it does not own,"
                                   f" lacks {sorted(want - held)}")
                return False
        return True

    @staticmethod
    def ingested(r: Replica) -> float:
        try:
            return r.metrics().get("ingested", 0.0)
        except httpx.HTTPError:
            return 0.0


def local_nodes(r: Replica) -> set[str]:
    """The nodes shard `r` itself holds (its own answer: `X-Gpuhealth-Local: 1`)."""
    out: set[str] = set()
    cursor: str | None = None
    while True:
        params = {"sort": "node", "limit": "500"} | ({"cursor": cursor} if cursor else {})
        got = httpx.get(f"{r.url}/v1/nodes", params=params, timeout=10,
                        headers={"X-Gpuhealth-Local": "1"})
        got.raise_for_status()
        body = got.json()
        out |= {str(n["node"]) for n in body["nodes"]}
        cursor = body.get("next_cursor")
        if not cursor:
            return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
