"""bench.cluster's failover scenario: an HA pair (two replicas of one shard, both pushed every
node's samples, as a Prometheus HA pair scrapes the same targets) on one PostgreSQL schema.

Each round: a GPU gets a double-bit ECC error; once its page reached the receiver, the replica
holding the `leader` lease is killed with SIGKILL (mid-incident: the failure has not recovered)
and at the same moment another GPU logs an Xid 79. Measured from the kill: until the standby
holds the lease (the cluster_lease row) and until the receiver got its first notification
after the kill (the Xid's page, which only a leader sends). Then the ECC error recovers, the
killed replica is restarted (a standby now) and the round ends when both resolves arrived.
The breaker's row and window are read just before the kill and once the lease moved."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.cluster_agents import Agents, Failure
from bench.cluster_stack import ClusterStack, Replica
from service.cluster.roles import LEADER

log = logging.getLogger(__name__)
PAGE_TIMEOUT_S = 90.0
POLL_S = 0.1


@dataclass(slots=True)
class Round:
    lease_s: float | None = None  # kill -> the standby holds the leader lease
    notify_s: float | None = None  # kill -> the first notification received after it
    breaker_kept: bool = False
    failures: list[Failure] = field(default_factory=list)


@dataclass(slots=True)
class FailoverResult:
    rounds: list[Round] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)

    def times(self, what: str) -> list[float]:
        return [getattr(r, what) for r in self.rounds if getattr(r, what) is not None]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": len(self.rounds)}
        for what in ("lease_s", "notify_s"):
            got = self.times(what)
            out[what] = {"median": round(statistics.median(got), 2) if got else None,
                         "max": round(max(got), 2) if got else None,
                         "each": [round(x, 2) for x in got]}
        return out


def pages_of(stack: ClusterStack, entity: str, status: str, since: float) -> int:
    return sum(1 for n in stack.receiver.of("/notify") if n.at >= since
               for a in n.body.get("alerts", [])
               if a.get("labels", {}).get("entity") == entity and a.get("status") == status)


def wait_for(what: str, cond: Any, timeout_s: float = PAGE_TIMEOUT_S) -> float | None:
    """Poll `cond` until true; the time it became true, or None (logged) at the timeout."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return time.time()
        time.sleep(POLL_S)
    log.warning("timed out after %.0f s waiting for %s", timeout_s, what)
    return None


class FailoverRun:
    def __init__(self, stack: ClusterStack, nodes: int, gpus: int) -> None:
        self.stack = stack
        self.hosts = [f"ha{i:03d}" for i in range(nodes)]
        self.gpus = gpus
        self.pair: list[Replica] = []
        self.agents: Agents | None = None
        self.result = FailoverResult()
        self._n = 0

    def start(self) -> None:
        self.pair = self.stack.scenario("bench-ha", [("ha-0", "ha"), ("ha-1", "ha")],
                                        sharded=False)
        urls = [f"{r.url}/write" for r in self.pair]
        self.agents = Agents({h: self.gpus for h in self.hosts}, {h: urls for h in self.hosts},
                             self.stack.timers.step_s, self.stack.root / "ledger-failover.lp")
        self.agents.start()

    def _next_failure(self, kind: str) -> Failure:
        f = Failure(self.hosts[self._n % len(self.hosts)], (self._n // len(self.hosts))
                    % self.gpus, kind)
        self._n += 1
        return f

    def leader(self) -> tuple[Replica, int] | None:
        held = self.stack.lease(LEADER)
        if held is None:
            return None
        return next(((r, held[1]) for r in self.pair if r.holds(held[0])), None)

    def round(self) -> Round:
        assert self.agents is not None
        rnd = Round()
        got = None
        if wait_for("a leader", lambda: self.leader() is not None) is not None:
            got = self.leader()
        if got is None:
            raise RuntimeError("no replica of the HA pair holds the leader lease")
        victim, epoch = got
        self.result.epochs.append(epoch)
        dbe, xid = self._next_failure("dbe"), self._next_failure("xid79")
        rnd.failures = [dbe, xid]
        self.result.failures += rnd.failures
        t0 = time.time()
        self.agents.inject(dbe)
        if wait_for(f"the page of {dbe.entity}",
                    lambda: pages_of(self.stack, dbe.entity, "firing", t0) > 0) is None:
            raise RuntimeError(f"{dbe.entity} was never paged; nothing to fail over from")
        before = self.stack.breaker()
        killed = time.time()
        victim.proc.kill9()
        self.agents.inject(xid)
        log.info("killed %s (the leader, epoch %d) with %s paged", victim.name, epoch,
                 dbe.entity)
        moved = wait_for("the standby to take the lease", lambda: (
            (g := self.leader()) is not None and g[0] is not victim))
        if moved is not None:
            rnd.lease_s = moved - killed
            after = self.stack.breaker()
            rnd.breaker_kept = after[0] == before[0] and before[1] <= after[1]
        first = wait_for("the first notification after the kill", lambda: any(
            n.at > killed for n in self.stack.receiver.of("/notify")))
        if first is not None:
            first_at = min(n.at for n in self.stack.receiver.of("/notify") if n.at > killed)
            rnd.notify_s = first_at - killed
        self.agents.recover(dbe)
        restart = threading.Thread(target=victim.start, name="restart", daemon=True)
        restart.start()
        for f in rnd.failures:
            wait_for(f"the resolve of {f.entity}",
                     lambda f=f: pages_of(self.stack, f.entity, "resolved", t0) > 0,
                     timeout_s=PAGE_TIMEOUT_S + 3 * self.stack.timers.resolve_s
                     + self.stack.timers.xid_hold_s)
        restart.join(timeout=240)
        log.info("round %d: lease moved in %s s, first notification %s s after the kill",
                 len(self.result.rounds) + 1, _s(rnd.lease_s), _s(rnd.notify_s))
        self.result.rounds.append(rnd)
        return rnd

    def stop(self) -> None:
        if self.agents is not None:
            self.agents.stop()


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f}"
