"""bench.cluster's truth probe: what each live replica of the HA pair says about who leads,
asked about once a second through the whole failover scenario (`GET /v1/cluster`, and
`/readyz`'s `cluster` field every fifth sweep), kept for the invariants (bench.cluster_verdict):

- no two leaders: a replica that says it leads, with its sender running, after another replica
  took the lease later than it did (a stale claim), or two that say so in one sweep;
- the replica that says it leads is the lease holder the shared state names;
- the pager receiver's `last_notified` moves past each round's loss once the round paged.

A replica that is down or still starting answers nothing (connection refused: cheap); one the
bench paused with SIGSTOP is not asked (its socket would take the request and never answer)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from bench.cluster_stack import Replica

log = logging.getLogger(__name__)
INTERVAL_S = 1.0
READYZ_EVERY = 5  # sweeps: /readyz does more work (collectors, scoring, the shared state)
ASK_TIMEOUT_S = 3.0
CLOCK_SLACK_S = 0.01  # times come back at millisecond precision


def instant(v: Any) -> float | None:
    """A time of the API (or null) as epoch seconds: RFC 3339, as `/v1/cluster` sends it, or
    epoch seconds, as `/readyz`'s `cluster` field does today (its schema says date-time)."""
    if v is None or v == "":
        return None
    if isinstance(v, int | float):
        return float(v)
    return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True)
class Seen:
    """One answer: what `replica` said, asked at `asked` (wall clock)."""

    sweep: int
    asked: float
    replica: str  # the bench's name for it (ha-0)
    source: str  # cluster (/v1/cluster) or readyz
    leading: bool
    dispatcher: bool
    leading_since: float | None  # when it took the lease it holds (the database's clock)
    holder: str  # the leader lease's holder, as the shared state names it
    holder_is_self: bool
    since: float | None  # when that holder took it
    pager_last: float | None  # last_notified of the pager receiver

    @property
    def claims(self) -> bool:
        """It says it leads and sends."""
        return self.leading and self.dispatcher


def read(r: Replica, body: dict[str, Any], sweep: int, asked: float, source: str) -> Seen:
    t = body["cluster"] if source == "readyz" else body
    leader = t.get("leader") or {}
    holder = str(leader.get("replica") or "")
    return Seen(sweep, asked, r.name, source, bool(t.get("leading")),
                bool(t.get("dispatcher_running")), instant(t.get("leading_since")), holder,
                bool(holder) and r.holds(holder), instant(leader.get("since")),
                instant((t.get("last_notified") or {}).get("pager")))


class TruthProbe:
    def __init__(self, replicas: list[Replica], interval_s: float = INTERVAL_S) -> None:
        self.replicas, self.interval_s = replicas, interval_s
        self.seen: list[Seen] = []
        self.errors = 0  # requests to a process that runs and is not paused, unanswered
        self._paused: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=ASK_TIMEOUT_S)
        self._thread = threading.Thread(target=self._run, name="truth-probe", daemon=True)

    def pause(self, name: str) -> None:
        """Stop asking `name` (about to be SIGSTOPped)."""
        with self._lock:
            self._paused.add(name)

    def resume(self, name: str) -> None:
        with self._lock:
            self._paused.discard(name)

    def ask(self, r: Replica, source: str = "cluster", sweep: int = -1) -> Seen | None:
        """What `r` says now; None when it does not answer."""
        asked = time.time()
        try:
            resp = self._client.get(f"{r.url}{'/readyz' if source == 'readyz' else '/v1/cluster'}")
        except httpx.HTTPError:
            return None
        if resp.status_code not in (200, 503):
            return None
        try:
            seen = read(r, resp.json(), sweep, asked, source)
        except (ValueError, KeyError, TypeError):
            log.warning("%s: %s answered what the probe cannot read", r.name, source)
            return None
        with self._lock:
            self.seen.append(seen)
        return seen

    def _sweep(self, n: int) -> None:
        for r in list(self.replicas):
            with self._lock:
                if r.name in self._paused:
                    continue
            if r.proc.pid is None:
                continue
            for source in ("cluster", "readyz") if n % READYZ_EVERY == 0 else ("cluster",):
                if self.ask(r, source, n) is None and r.proc.pid is not None:
                    self.errors += 1  # starting (not listening yet) counts here too

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.interval_s):
            try:
                self._sweep(n)
            except Exception:  # a bench bug: logged, the next sweep still runs
                log.exception("a truth probe sweep failed")
            n += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self._client.close()

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)


# ---- reading it back ------------------------------------------------------------------------
def stale_claims(seen: list[Seen], taken: Iterable[float]) -> list[Seen]:
    """Answers that claim the lead after a later holder had taken the lease: the claim's own
    `leading_since` is older than an acquisition (`taken`, the database's clock) that happened
    before the question was even asked."""
    times = sorted({t for t in taken} | {s.since for s in seen if s.since is not None})
    out = []
    for s in seen:
        if not s.claims:
            continue
        mine = s.leading_since if s.leading_since is not None else float("-inf")
        if any(mine + CLOCK_SLACK_S < t < s.asked for t in times):
            out.append(s)
    return out


def double_claims(seen: list[Seen]) -> int:
    """Sweeps in which two replicas both said they lead and send."""
    by: dict[tuple[int, str], set[str]] = {}
    for s in seen:
        if s.claims and s.sweep >= 0:
            by.setdefault((s.sweep, s.source), set()).add(s.replica)
    return sum(1 for names in by.values() if len(names) > 1)


def wrong_holder(seen: list[Seen]) -> list[Seen]:
    """Answers that claim the lead while the shared state names another holder (or none)."""
    return [s for s in seen if s.leading and not s.holder_is_self]


def notified_moved(seen: list[Seen], past: float, after: float, until: float) -> bool:
    """Some answer asked between `after` and `until` has the pager's last_notified at `past`
    or later."""
    return any(after <= s.asked <= until and s.pager_last is not None
               and s.pager_last >= past for s in seen)
