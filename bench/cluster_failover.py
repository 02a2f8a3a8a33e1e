"""bench.cluster's failover scenario: an HA pair (two replicas of one shard, both pushed every
node's samples, as a Prometheus HA pair scrapes the same targets) on one PostgreSQL schema.

Every round starts mid-incident: a GPU gets a double-bit ECC error and the leader pages it.
Then the leader is lost and at that moment another GPU logs an Xid 79, which only the next
leader can page. Three kinds of round:

- `kill`: the leader is killed with SIGKILL, and restarted (a standby now) once its successor
  notified;
- `starting`: the standby is killed and restarted, and while it is still starting (before
  /healthz answers) the leader is killed: the starting replica must take over; the killed one
  is restarted after;
- `partition`: the leader is paused with SIGSTOP (the kernel keeps its sockets, as a
  partition from the database would leave it) for longer than the lease (ttl + 2 renewals),
  then continued: the standby must take over and page, and the old leader must send nothing
  after the new one took the lease and say at once that it no longer leads.

Measured from the loss: until the standby holds the lease, until the receiver got its first
notification, until the Xid's page; and the Xid's page after the lease's `acquired_at` (the
database's clock): a new leader pages within two ticks of taking over. Then the ECC error
recovers and the round ends when both resolves arrived. The breaker's row and window are read
just before the loss and once the lease moved. A probe (bench.cluster_probe) asks every live
replica who leads, through all of it."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.cluster_agents import Agents, Failure
from bench.cluster_probe import TruthProbe
from bench.cluster_stack import ClusterStack, Replica
from service.cluster.roles import LEADER

log = logging.getLogger(__name__)
PAGE_TIMEOUT_S = 90.0
POLL_S = 0.1
ANSWER_TIMEOUT_S = 30.0  # a continued leader's first /v1/cluster answer, at the latest
KINDS = ("kill", "starting", "partition")


@dataclass(slots=True)
class Round:
    kind: str = "kill"
    victim: str = ""  # the leader lost
    to: str = ""  # the replica that took the lease
    epoch: int = 0  # the lost leader's
    started: float = 0.0
    lost_at: float = 0.0  # the kill (or SIGSTOP)
    lease_s: float | None = None  # loss -> the standby holds the leader lease
    notify_s: float | None = None  # loss -> the first notification received after it
    acquired_at: float | None = None  # the new leader took the lease (database clock)
    page_at: float | None = None  # the Xid injected at the loss, first paged (receiver)
    ended: float = 0.0
    breaker_kept: bool = False
    failures: list[Failure] = field(default_factory=list)
    paged: int = 0  # of `failures`, paged within the round
    resolved: int = 0  # of `failures`, resolved within the round
    duplicates: int = 0  # an alert of the round's failures paged by more than one message
    # starting: the standby had been restarted and did not answer /healthz at the kill
    still_starting: bool | None = None
    # partition: when the old leader was continued, its first /v1/cluster answer after that
    # (seconds, and whether it said it leads), and its notifications after the new lease
    continued_at: float | None = None
    answer_s: float | None = None
    answer_leading: bool | None = None
    old_sent_after_lease: int = 0
    old_sent_after_continue: int = 0

    @property
    def page_s(self) -> float | None:
        return None if self.page_at is None else self.page_at - self.lost_at

    @property
    def page_after_lease_s(self) -> float | None:
        if self.page_at is None or self.acquired_at is None:
            return None
        return self.page_at - self.acquired_at

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind, "lost": f"{self.victim} (epoch {self.epoch})", "to": self.to,
            "lease_s": _r(self.lease_s), "notify_s": _r(self.notify_s),
            "page_s": _r(self.page_s), "page_after_lease_s": _r(self.page_after_lease_s),
            "paged": f"{self.paged} of {len(self.failures)}",
            "resolved": f"{self.resolved} of {len(self.failures)}",
            "duplicates": self.duplicates, "breaker_kept": self.breaker_kept}
        if self.kind == "starting":
            out["still_starting_at_kill"] = self.still_starting
        if self.kind == "partition":
            out |= {"answer_after_continue_s": _r(self.answer_s),
                    "answer_leading": self.answer_leading,
                    "old_leader_sent_after_lease": self.old_sent_after_lease,
                    "old_leader_sent_after_continue": self.old_sent_after_continue}
        return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def spread(xs: list[float]) -> dict[str, Any]:
    return {"min": _r(min(xs)) if xs else None,
            "median": _r(statistics.median(xs)) if xs else None,
            "max": _r(max(xs)) if xs else None, "each": [_r(x) for x in xs]}


@dataclass(slots=True)
class FailoverResult:
    rounds: list[Round] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    step_s: float = 5.0

    def times(self, what: str, kind: str | None = None) -> list[float]:
        return [v for r in self.rounds if kind is None or r.kind == kind
                if (v := getattr(r, what)) is not None]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": len(self.rounds),
                               "kinds": dict(Counter(r.kind for r in self.rounds))}
        for what in ("lease_s", "notify_s", "page_after_lease_s"):
            out[what] = spread(self.times(what))
            out[f"kills_{what}"] = spread(self.times(what, "kill"))
        out["each_round"] = [r.row() for r in self.rounds]
        return out


def pages_of(stack: ClusterStack, entity: str, status: str, since: float) -> int:
    return sum(1 for n in stack.receiver.of("/notify") if n.at >= since
               for a in n.body.get("alerts", [])
               if a.get("labels", {}).get("entity") == entity and a.get("status") == status)


def first_page(stack: ClusterStack, entity: str, since: float) -> float | None:
    got = [n.at for n in stack.receiver.of("/notify") if n.at > since
           for a in n.body.get("alerts", [])
           if a.get("labels", {}).get("entity") == entity and a.get("status") == "firing"]
    return min(got) if got else None


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
        if nodes < 2:
            raise ValueError("the failover run needs two nodes (a DBE and an Xid on each)")
        self.stack = stack
        self.hosts = [f"ha{i:03d}" for i in range(nodes)]
        self.gpus = gpus
        self.pair: list[Replica] = []
        self.agents: Agents | None = None
        self.probe: TruthProbe | None = None
        self.result = FailoverResult(step_s=stack.timers.step_s)
        self._n = 0
        self._before: tuple[Any, ...] = ()  # the breaker just before the loss

    def start(self) -> None:
        self.pair = self.stack.scenario("bench-ha", [("ha-0", "ha"), ("ha-1", "ha")],
                                        sharded=False)
        urls = [f"{r.url}/write" for r in self.pair]
        self.agents = Agents({h: self.gpus for h in self.hosts}, {h: urls for h in self.hosts},
                             self.stack.timers.step_s, self.stack.root / "ledger-failover.lp")
        self.agents.start()
        self.probe = TruthProbe(self.pair)
        self.probe.start()

    def _failures(self) -> tuple[Failure, Failure]:
        """This round's DBE, on a node of the first half, and its Xid, on one of the second
        half counted from the end: the node the agents push last, where a sender starved by
        the dead replica's retries shows first (issue 36). A GPU further each time around."""
        n, half = len(self.hosts), max(1, len(self.hosts) // 2)
        i, self._n = self._n, self._n + 1
        gpu = (i // half) % self.gpus
        return (Failure(self.hosts[i % half], gpu, "dbe"),
                Failure(self.hosts[n - 1 - i % half], gpu, "xid79"))

    def leader(self) -> tuple[Replica, int] | None:
        held = self.stack.lease(LEADER)
        if held is None:
            return None
        return next(((r, held[1]) for r in self.pair if r.holds(held[0])), None)

    # ---- the rounds -----------------------------------------------------------------------
    def kill_round(self) -> Round:
        """The leader killed mid-incident, restarted once its successor notified."""
        rnd, victim, _ = self._begin("kill")
        self._lose(rnd, victim.proc.kill9)
        self._moved(rnd, victim)
        self._paged(rnd)
        return self._end(rnd, restart=victim)

    def starting_round(self) -> Round:
        """The standby killed and restarted; while it starts, the leader killed."""
        rnd, victim, standby = self._begin("starting")
        standby.proc.kill9()
        standby.start(wait=False)
        rnd.still_starting = not _answers(standby)
        self._lose(rnd, victim.proc.kill9)
        log.info("killed %s while %s was starting (not answering: %s)", victim.name,
                 standby.name, rnd.still_starting)
        self._moved(rnd, victim)
        self._paged(rnd)
        return self._end(rnd, restart=victim, starting=standby)

    def partition_round(self) -> Round:
        """The leader paused (SIGSTOP) past its lease, then continued: a partition from the
        shared state that heals."""
        assert self.probe is not None
        rnd, victim, _ = self._begin("partition")
        pid = victim.proc.pid
        if pid is None:
            raise RuntimeError(f"{victim.name} is not running")
        t = self.stack.timers
        self.probe.pause(victim.name)
        try:
            self._lose(rnd, lambda: os.kill(pid, signal.SIGSTOP))
            self._moved(rnd, victim)
            time.sleep(max(0.0, rnd.lost_at + t.lease_ttl_s + 2 * t.lease_renew_s - time.time()))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            rnd.continued_at = time.time()
            self.probe.resume(victim.name)
        log.info("continued %s %.1f s after its SIGSTOP", victim.name,
                 rnd.continued_at - rnd.lost_at)
        deadline = rnd.continued_at + ANSWER_TIMEOUT_S
        while time.time() < deadline:
            answer = self.probe.ask(victim)
            if answer is not None:
                rnd.answer_s = time.time() - rnd.continued_at
                rnd.answer_leading = answer.leading
                break
            time.sleep(POLL_S)
        self._paged(rnd)
        self._end(rnd)
        old = [n.at for n in self.stack.receiver.of("/notify")
               if n.body.get("externalURL") == victim.url and n.at <= rnd.ended]
        if rnd.acquired_at is not None:
            rnd.old_sent_after_lease = sum(1 for at in old if at > rnd.acquired_at)
        rnd.old_sent_after_continue = sum(1 for at in old if at > rnd.continued_at)
        return rnd

    # ---- the parts of a round -------------------------------------------------------------
    def _begin(self, kind: str) -> tuple[Round, Replica, Replica]:
        """The leader, the other replica, and a new round mid-incident: a DBE paged."""
        assert self.agents is not None
        got = None
        if wait_for("a leader", lambda: self.leader() is not None) is not None:
            got = self.leader()
        if got is None:
            raise RuntimeError("no replica of the HA pair holds the leader lease")
        victim, epoch = got
        other = next(r for r in self.pair if r is not victim)
        rnd = Round(kind=kind, victim=victim.name, epoch=epoch, started=time.time())
        self.result.epochs.append(epoch)
        dbe, xid = self._failures()
        rnd.failures = [dbe, xid]
        self.result.failures += rnd.failures
        self.agents.inject(dbe)
        wait_for(f"the page of {dbe.entity}",
                 lambda: pages_of(self.stack, dbe.entity, "firing", rnd.started) > 0)
        return rnd, victim, other

    def _lose(self, rnd: Round, how: Any) -> None:
        """The leader lost (`how`), the Xid injected at the same moment."""
        assert self.agents is not None
        self._before = self.stack.breaker()
        rnd.lost_at = time.time()
        how()
        self.agents.inject(rnd.failures[1])
        log.info("%s round: lost %s (the leader, epoch %d) with %s paged", rnd.kind,
                 rnd.victim, rnd.epoch, rnd.failures[0].entity)

    def _moved(self, rnd: Round, victim: Replica) -> None:
        moved = wait_for("the standby to take the lease", lambda: (
            (g := self.leader()) is not None and g[0] is not victim))
        if moved is None:
            return
        rnd.lease_s = moved - rnd.lost_at
        got = self.leader()
        taken = self.stack.lease_taken(LEADER)
        if got is not None:
            rnd.to = got[0].name
            if taken is not None and taken[1] == got[1]:
                rnd.acquired_at = taken[2]
        after = self.stack.breaker()
        rnd.breaker_kept = after[0] == self._before[0] and self._before[1] <= after[1]

    def _paged(self, rnd: Round) -> None:
        """The first notification after the loss, and the Xid's page."""
        lost, xid = rnd.lost_at, rnd.failures[1]
        if wait_for("the first notification after the loss", lambda: any(
                n.at > lost for n in self.stack.receiver.of("/notify"))) is not None:
            rnd.notify_s = min(n.at for n in self.stack.receiver.of("/notify")
                               if n.at > lost) - lost
        wait_for(f"the page of {xid.entity}",
                 lambda: first_page(self.stack, xid.entity, lost) is not None)
        rnd.page_at = first_page(self.stack, xid.entity, lost)

    def _end(self, rnd: Round, restart: Replica | None = None,
             starting: Replica | None = None) -> Round:
        """The DBE recovers, the lost replica restarts, and every resolve owed arrives."""
        assert self.agents is not None
        self.agents.recover(rnd.failures[0])
        threads = [threading.Thread(target=r.wait_healthy if r is starting else r.start,
                                    name=f"restart-{r.name}", daemon=True)
                   for r in (restart, starting) if r is not None]
        for th in threads:
            th.start()
        t = self.stack.timers
        for f in rnd.failures:
            wait_for(f"the resolve of {f.entity}",
                     lambda f=f: pages_of(self.stack, f.entity, "resolved", rnd.started) > 0,
                     timeout_s=PAGE_TIMEOUT_S + 3 * t.resolve_s + t.xid_hold_s)
        for th in threads:
            th.join(timeout=240)
        rnd.ended = time.time()
        entities = {f.entity for f in rnd.failures}
        notes = [n for n in self.stack.receiver.of("/notify") if n.at >= rnd.started]
        firing: Counter[tuple[str, str]] = Counter()
        for n in notes:
            for a in n.body.get("alerts", []):
                if a.get("labels", {}).get("entity") in entities and a.get("status") == "firing":
                    firing[str(a.get("fingerprint")), str(a.get("startsAt"))] += 1
        rnd.duplicates = sum(c - 1 for c in firing.values() if c > 1)
        rnd.paged = sum(pages_of(self.stack, e, "firing", rnd.started) > 0 for e in entities)
        rnd.resolved = sum(pages_of(self.stack, e, "resolved", rnd.started) > 0
                           for e in entities)
        log.info("%s round %d: lease moved to %s in %s s, first notification %s s and the Xid "
                 "paged %s s after the loss (%s s after the lease was taken)", rnd.kind,
                 len(self.result.rounds) + 1, rnd.to or "nobody", _s(rnd.lease_s),
                 _s(rnd.notify_s), _s(rnd.page_s), _s(rnd.page_after_lease_s))
        self.result.rounds.append(rnd)
        return rnd

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.stop()
        if self.agents is not None:
            self.agents.stop()


def _answers(r: Replica) -> bool:
    """Whether `r` answers /healthz now."""
    try:
        return httpx.get(f"{r.url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f}"
