"""The fuzz benchmark's surfaces beyond `/write` line protocol (docs/fuzz.md): each class of
hostile input runs in its own thread against the running service while `/write` is fuzzed,
and counts what it sent and how it was answered.

A class comes from a generator module (one per surface, each written with the fix it keeps
honest), imported when the run chooses the class (`--classes`), so a run without it needs
none of its imports:

| class | module | entry |
|---|---|---|
| class | module | what this run does with it |
|---|---|---|
| arrow | bench.fuzz_arrow | `hostile_arrow_bodies`: each body to `/write` with its type |
| silences | bench.fuzz_run_silences | hostile silences with the run's operate token |
| auth | bench.fuzz_run_auth | bad tokens from one address while valid reads go on |
| slow_clients | bench.fuzz_clients | `SlowClients`: rounds of 300 trickling connections |
| relay | bench.fuzz_relay | `actions` through a real relay in front of the service |
| shards | bench.fuzz_shards | its `run`: two real shards of its own, fed beside this run |
| api | bench.fuzz_api | `hostile_requests` with the run's operate token |

Each class sends until `target.stop` is set, pacing itself, and records every answer with
`stats.answer` (a 5xx is a missed goal whatever the class). The notifications and drains its
inputs cause are judged by the benchmark as a whole (bench.fuzz_run_notify)."""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger(__name__)
ARROW = "application/vnd.apache.arrow.stream"
TIMEOUT_S = 30.0


@dataclass
class Target:
    """The running service as every class sees it."""

    url: str
    root: Path  # the run's work directory (config, data, logs)
    token: str  # an operate-scope API token (silences, authenticated reads)
    known_nodes: frozenset[str]  # the nodes valid input names; any other is a phantom
    stop: threading.Event = field(default_factory=threading.Event)
    in_flight: dict[str, str] = field(default_factory=dict)  # class -> what it sends now
    procs: list[Any] = field(default_factory=list)  # processes a class started (the run stops them)


@dataclass
class ClassStats:
    name: str
    inputs: int = 0
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    status_5xx: int = 0
    transport_errors: int = 0
    figures: dict[str, float] = field(default_factory=dict)  # what the class itself reports
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, r: httpx.Response | None, inputs: int = 1, what: str = "") -> None:
        """One request's answer (None: it got none)."""
        with self._lock:
            self.inputs += inputs
            self.requests += 1
            if r is None:
                self.transport_errors += 1
                return
            key = str(r.status_code)
            self.by_status[key] = self.by_status.get(key, 0) + 1
            if r.status_code >= 500 and not (r.status_code == 503
                                             and "retry-after" in r.headers):
                self.status_5xx += 1  # a 503 with Retry-After is a refusal to send again
                log.warning("5xx from %s (%s): %s %s", self.name, what, r.status_code,
                            r.text[:300])

    def count(self, figure: str, n: float = 1) -> None:
        with self._lock:
            self.figures[figure] = self.figures.get(figure, 0) + n

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
                    if f.name != "_lock"}


def call(client: httpx.Client, target: Target, stats: ClassStats, method: str, path: str,
         what: str = "", inputs: int = 1, **kw: Any) -> httpx.Response | None:
    """One request, its answer recorded; None when it got no answer."""
    target.in_flight[stats.name] = what or path
    try:
        r = client.request(method, f"{target.url}{path}", timeout=TIMEOUT_S, **kw)
    except httpx.HTTPError as exc:
        log.warning("%s: %s %s failed: %s", stats.name, method, path, exc)
        r = None
    finally:
        target.in_flight.pop(stats.name, None)
    stats.answer(r, inputs, what or path)
    return r


Surface = Callable[[Target, random.Random, ClassStats], None]
CLI = "import sys; from service.commands.cli import main; sys.exit(main())"
ROUND_S = 20.0  # one round of slow clients


def _arrow() -> Surface:
    from bench.fuzz_arrow import hostile_arrow_bodies

    def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
        with httpx.Client() as client:
            for kind, body, ctype in hostile_arrow_bodies(rng):
                if target.stop.is_set():
                    return
                call(client, target, stats, "POST", "/write", f"arrow: {kind}", content=body,
                     headers={"Content-Type": ctype})
                target.stop.wait(0.05)

    return run


def _silences() -> Surface:
    from bench.fuzz_run_silences import run
    return run


def _auth() -> Surface:
    from bench.fuzz_run_auth import run
    return run


def _slow_clients() -> Surface:
    from bench.fuzz_clients import Mode, SlowClients

    modes: tuple[Mode, ...] = ("headers", "body", "idle")

    def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
        port = int(target.url.rsplit(":", 1)[1])
        while not target.stop.is_set():  # a round of each mode, about 20 s each
            mode = rng.choice(modes)
            target.in_flight[stats.name] = f"300 slow clients ({mode})"
            with SlowClients("127.0.0.1", port, n=300, mode=mode) as slow:
                target.stop.wait(ROUND_S)
            stats.count("opened", slow.opened)
            stats.count("closed_by_service", slow.closed)
            stats.count("refused", slow.refused)
            with stats._lock:
                stats.inputs += slow.opened
        target.in_flight.pop(stats.name, None)

    return run


def _relay() -> Surface:
    from bench.fuzz_relay import actions, send
    from bench.soak_stack import Proc
    from tests.influx.server import free_port

    def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
        port, token = free_port(), "fuzz-relay-token"
        relay = Proc("relay", [sys.executable, "-c", CLI, "agent", "relay",
                               "--url", f"{target.url}/write", "--token", token,
                               "--listen", "127.0.0.1", "--port", str(port),
                               "--spool", str(target.root / "relay-spool")],
                     target.root / "relay.log")
        target.procs.append(relay)
        relay.start()
        try:
            if not _listening(port, target.stop):
                stats.count("relay_did_not_start")
                return
            for a in actions(rng, token):
                if target.stop.is_set():
                    return
                target.in_flight[stats.name] = f"relay: {a.kind}"
                try:
                    got = send(a, port)
                except OSError:
                    got = None
                target.in_flight.pop(stats.name, None)
                with stats._lock:
                    stats.inputs += 1
                    stats.requests += 1
                    key = "closed" if got is None else str(got)
                    stats.by_status[key] = stats.by_status.get(key, 0) + 1
                    stats.status_5xx += int(got is not None and got >= 500)
                target.stop.wait(0.1)
        finally:
            relay.stop()

    return run


def _listening(port: int, stop: threading.Event, within_s: float = 60.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not stop.is_set():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1.0):
            return True
        stop.wait(0.2)
    return False


def _shards() -> Surface:
    from bench.fuzz_shards import run as shards_run

    def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
        # Shard headers mean something only to a sharded service: two real shards of their
        # own on loopback (bench.fuzz_shards), fed while this run's service is fuzzed.
        target.in_flight[stats.name] = "two shards"
        rep = shards_run(2000, rng.randrange(2**31), target.root / "shards")
        target.in_flight.pop(stats.name, None)
        with stats._lock:
            stats.inputs += rep.requests
            stats.requests += rep.requests
            stats.by_status = dict(rep.by_status)
            stats.status_5xx += rep.status_5xx
        for figure in ("foreign_held", "foreign_alerts", "drains", "forwarded_lost"):
            stats.count(figure, getattr(rep, figure))
        stats.count("checks_missed", len(rep.missed))

    return run


def _api() -> Surface:
    from bench.fuzz_api import hostile_requests

    def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
        auth = {"Authorization": f"Bearer {target.token}"}
        with httpx.Client(headers=auth) as client:
            for req in hostile_requests(rng.randrange(2**31), 10**9, time.time()):
                if target.stop.is_set():
                    return
                body = req.body
                ctype = ("text/plain" if req.path.split("?")[0].endswith("/write")
                         else "application/json" if body and body[:1] in "{[" else
                         "application/x-www-form-urlencoded")
                call(client, target, stats, req.method, req.path, f"api: {req.kind}",
                     content=None if body is None else body.encode(),
                     headers={"Content-Type": ctype})
                target.stop.wait(0.1)

    return run


CLASSES: dict[str, Callable[[], Surface]] = {
    "arrow": _arrow, "silences": _silences, "auth": _auth, "slow_clients": _slow_clients,
    "relay": _relay, "shards": _shards, "api": _api}


class Surfaces:
    """The chosen classes, each in its own thread from `start` until `stop`."""

    def __init__(self, names: list[str], target: Target, seed: int) -> None:
        self.target = target
        self.stats = {n: ClassStats(n) for n in names}
        self._threads: list[threading.Thread] = []
        for i, n in enumerate(names):
            rng = random.Random(seed * 1000 + i)
            self._threads.append(threading.Thread(
                target=self._guard, args=(CLASSES[n](), rng, self.stats[n]), name=f"fuzz-{n}",
                daemon=True))

    def _guard(self, surface: Surface, rng: random.Random, stats: ClassStats) -> None:
        try:
            surface(self.target, rng, stats)
        except Exception:  # a broken generator is the benchmark's fault: said, and counted
            log.exception("the %s class stopped", stats.name)
            stats.count("generator_failed")

    @property
    def inputs(self) -> int:
        return sum(s.inputs for s in self.stats.values())

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self.target.stop.set()
        for t in self._threads:
            with contextlib.suppress(RuntimeError):
                t.join(timeout=TIMEOUT_S * 2)
