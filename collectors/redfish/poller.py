"""The BMC poller: many BMCs read on one asyncio loop, each on its own schedule.

Each BMC is read once per `interval_s` (60 s: BMCs are slow and fragile), the first reads
spread evenly over the first interval so the load is flat. At most `concurrency` reads run at
once; each has `timeout_s` from the moment it gets its slot, so a BMC that never answers holds
one slot for that long and delays no other (as long as fewer BMCs hang than there are slots).
A failed read is retried after interval x 2^(failures-1), at most `backoff_max_s`, and reports
`bmc_reachable` 0 for the node; a good read reports 1 with the node's readings.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import field

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.lineprotocol import Point
from collectors.redfish.client import Auth, RedfishClient, RedfishError, tls_context
from collectors.redfish.http import HttpError
from collectors.redfish.secret import CredentialStore
from collectors.redfish.targets import Bmc
from collectors.redfish.walk import BmcReader, Model

log = logging.getLogger(__name__)

Emit = Callable[[list[Point], list[Rejection]], None]


@dataclass(frozen=True, slots=True)
class PollerConfig:
    interval_s: float = 60.0
    timeout_s: float = 20.0
    concurrency: int = 100
    backoff_max_s: float = 900.0
    auth: Auth = "session"
    verify: bool | str = True
    max_response_bytes: int = 4_000_000
    model: Model = "auto"
    rediscover_every: int = 60  # reads between discoveries (an hour at 60 s)

    def __post_init__(self) -> None:
        problems = [f"{k} must be above 0" for k in ("interval_s", "timeout_s", "concurrency",
                                                      "backoff_max_s", "max_response_bytes",
                                                      "rediscover_every")
                    if not getattr(self, k) > 0]
        if self.auth not in ("session", "basic"):
            problems.append("auth must be session or basic")
        if self.model not in ("auto", "subsystem", "legacy"):
            problems.append("model must be auto, subsystem or legacy")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(slots=True)
class BmcState:
    bmc: Bmc
    reader: BmcReader
    client: RedfishClient
    next_at: float
    failures: int = 0
    reachable: bool | None = None  # None: not read yet
    last_error: str = ""
    last_seconds: float = math.nan  # of the last read, from getting a slot
    reads: int = 0


@dataclass(slots=True)
class Poller:
    bmcs: Sequence[Bmc]
    credentials: CredentialStore
    config: PollerConfig
    emit: Emit
    clock: Callable[[], float] = time.monotonic
    wall_ns: Callable[[], int] = time.time_ns
    states: list[BmcState] = field(init=False)
    _sem: asyncio.Semaphore | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        cfg = self.config
        tls = tls_context(cfg.verify) if any(b.scheme == "https" for b in self.bmcs) else None
        start, since = self.clock(), self.wall_ns() - int(cfg.interval_s * 1e9)
        n = max(len(self.bmcs), 1)
        self.states = [
            BmcState(b, BmcReader(b.name, since_ns=since, model=cfg.model,
                                  rediscover_every=cfg.rediscover_every),
                     RedfishClient(b, self.credentials.for_bmc(b.name), auth=cfg.auth, tls=tls,
                                   max_bytes=cfg.max_response_bytes),
                     start + cfg.interval_s * i / n)
            for i, b in enumerate(self.bmcs)]

    async def run(self, stop: asyncio.Event) -> None:
        """Poll every BMC on its schedule until `stop` is set."""
        due = [(s.next_at, i) for i, s in enumerate(self.states)]
        heapq.heapify(due)
        running: set[asyncio.Task[None]] = set()
        finished: list[int] = []

        def done(i: int) -> Callable[[asyncio.Task[None]], None]:
            def cb(t: asyncio.Task[None]) -> None:
                running.discard(t)
                finished.append(i)
            return cb

        while not stop.is_set():
            while finished:
                i = finished.pop()
                heapq.heappush(due, (self.states[i].next_at, i))
            now = self.clock()
            while due and due[0][0] <= now:
                _, i = heapq.heappop(due)
                t = asyncio.create_task(self.poll(self.states[i]))
                running.add(t)
                t.add_done_callback(done(i))
            wait = min((due[0][0] - now) if due else 1.0, 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(wait, 0.01))
        for t in list(running):
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def cycle(self) -> None:
        """Every BMC once, now (tests, the benchmark, `--once`)."""
        await asyncio.gather(*(self.poll(s) for s in self.states))

    async def poll(self, st: BmcState) -> None:
        cfg = self.config
        if self._sem is None:
            self._sem = asyncio.Semaphore(cfg.concurrency)
        async with self._sem:
            t0 = self.clock()
            ts = self.wall_ns()
            try:
                # wait_for, not asyncio.timeout (3.11): the agent runs on 3.9+. Before 3.11 it
                # raises asyncio.TimeoutError, not the built-in.
                reading, skips = await asyncio.wait_for(st.reader.read(st.client.get, ts),
                                                        cfg.timeout_s)
            except (HttpError, RedfishError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
                why = str(exc) if not isinstance(exc, (TimeoutError, asyncio.TimeoutError)) else \
                    f"{st.bmc.authority}: no complete answer within {cfg.timeout_s:g} s"
                self._failed(st, why, t0, ts)
                return
            except Exception as exc:  # a bug on one BMC's odd answer: the others go on
                log.exception("redfish: reading %s failed", st.bmc.authority)
                self._failed(st, f"{type(exc).__name__} reading {st.bmc.authority}", t0, ts)
                return
            st.last_seconds = self.clock() - t0
        if st.reachable is False:
            log.info("redfish: BMC of %s answers again", st.bmc.name)
        st.failures, st.reachable, st.last_error, st.reads = 0, True, "", st.reads + 1
        st.next_at = t0 + cfg.interval_s
        reading.node["bmc_reachable"] = 1
        self.emit(reading.points(st.bmc.name, ts), skips.rejected)

    def _failed(self, st: BmcState, why: str, t0: float, ts: int) -> None:
        st.client.drop()
        st.last_seconds = self.clock() - t0
        st.failures += 1
        if st.reachable is not False or st.last_error != why:
            log.warning("redfish: BMC of %s: %s", st.bmc.name, why)
        st.reachable, st.last_error = False, why
        delay = min(self.config.interval_s * 2 ** min(st.failures - 1, 30),
                    max(self.config.backoff_max_s, self.config.interval_s))
        st.next_at = t0 + delay
        self.emit([Point("node", {"host": st.bmc.name}, {"bmc_reachable": 0}, ts)],
                  [Rejection(why, None, st.bmc.name, "bmc_reachable")])

    async def aclose(self) -> None:
        await asyncio.gather(*(s.client.close() for s in self.states), return_exceptions=True)
