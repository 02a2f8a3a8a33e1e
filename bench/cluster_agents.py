"""bench.cluster's simulated node agents: each node's GPUs as line protocol every step, pushed by
the product's Pusher (collectors.agent.push: it names its node, follows a shard's 307 and
remembers the owner) to one or more targets; a relay (a Telegraf-like sender) that posts one
body holding several nodes without naming any, so a shard splits it and forwards the parts.

Hard failures are injected and recovered by hand: a double-bit ECC error (`ecc_dbe_volatile`
1 until recovered) or an Xid 79 (the GPU fell off the bus, one event; its risk is held for
`detectors.hard.xid_hold_s`). Every push the target took is written to a ledger in the soak's
format (bench.soak_ledger reads it back), so samples sent are counted against what InfluxDB
holds."""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from collectors.agent.push import Outcome, Pusher, PushResult

log = logging.getLogger(__name__)
RETRY_FOR_S = 120.0  # a push to be retried is resent this long at most
HEALTHY = {"gpu_temp": 55.0, "mem_temp": 60.0, "power_draw": 500.0, "sm_clock": 1980.0,
           "gpu_util": 90.0}


@dataclass(frozen=True, slots=True)
class Failure:
    host: str
    gpu: int
    kind: str  # dbe or xid79

    @property
    def entity(self) -> str:
        return f"{self.host}:gpu{self.gpu}"


class LedgerPusher(Pusher):
    """The product's Pusher, with every push the target took appended to a ledger."""

    def __init__(self, url: str, ledger: Ledger, host: str | None) -> None:
        super().__init__(url, timeout_s=10.0, host=host)
        self.ledger = ledger

    def push(self, body: bytes) -> PushResult:
        res = super().push(body)
        self.ledger.write(res, gzip.decompress(body).decode())
        return res


@dataclass(slots=True)
class Ledger:
    path: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: Counter[str] = field(default_factory=Counter)

    def write(self, res: PushResult, text: str) -> None:
        with self.lock:
            self.outcomes[str(res.status) if res.status else "error"] += 1
            if res.outcome is not Outcome.SENT:
                return
            with self.path.open("a") as fh:
                fh.write(f"#push {time.time():.6f} {res.status}\n{text}")
                if not text.endswith("\n"):
                    fh.write("\n")


class Agents:
    """`nodes` (host -> GPUs) pushed every `step_s` on a thread of their own; node `h` goes to
    each URL of `targets[h]` (an HA pair: both replicas; sharded: one shard, maybe the wrong
    one). `relay`: (URL, hosts) posted as one body naming no node.

    Each (node, target) pair has a queue and a sender of its own, as the product's agent keeps
    a spool and a backoff per target (collectors.agent.target): a target that is down holds
    only its own pushes, which it gets late or never (its twin has them, or the sample is
    counted as lost), never another target's. (When one pool served every target, a killed
    replica's retries took every worker and starved the standby of data for minutes: issue
    36.)"""

    def __init__(self, nodes: dict[str, int], targets: dict[str, list[str]], step_s: float,
                 ledger: Path, relay: tuple[str, list[str]] | None = None) -> None:
        self.nodes, self.step_s = nodes, step_s
        self.ledger = Ledger(ledger)
        self.pushers = {h: [LedgerPusher(u, self.ledger, h) for u in targets.get(h, [])]
                        for h in nodes}
        self.relay = (LedgerPusher(relay[0], self.ledger, None), relay[1]) if relay else None
        self.relay_pushes = 0
        self.failing: dict[tuple[str, int], str] = {}
        self.events: list[tuple[str, int]] = []  # Xid 79s to send with the next round
        self.lock = threading.Lock()
        self.rounds = 0
        self._stop = threading.Event()
        # One sender per (node, target): its pushes in order, independent of the others.
        self._senders = {id(p): ThreadPoolExecutor(1, thread_name_prefix="bench-agent")
                         for p in self._all_pushers()}
        self._thread = threading.Thread(target=self._run, name="bench-agents", daemon=True)

    # ---- failures -------------------------------------------------------------------------
    def inject(self, f: Failure) -> None:
        with self.lock:
            if f.kind == "xid79":
                self.events.append((f.host, f.gpu))
            else:
                self.failing[(f.host, f.gpu)] = f.kind
        log.info("injected %s on %s", f.kind, f.entity)

    def recover(self, f: Failure) -> None:
        with self.lock:
            self.failing.pop((f.host, f.gpu), None)
        log.info("recovered %s on %s", f.kind, f.entity)

    # ---- the rounds -----------------------------------------------------------------------
    def lines(self, host: str, ts_ns: int, events: list[tuple[str, int]]) -> list[str]:
        out = []
        for g in range(self.nodes[host]):
            dbe = 1 if self.failing.get((host, g)) == "dbe" else 0
            fields = ",".join(f"{k}={v}" for k, v in HEALTHY.items())
            out.append(f"gpu,host={host},gpu={g} {fields},ecc_dbe_volatile={dbe}i {ts_ns}")
        out += [f"xid,host={h},gpu={g} code=79i {ts_ns}" for h, g in events if h == host]
        return out

    def round(self, ts: float) -> None:
        ts_ns = int(ts * 1e9)
        with self.lock:
            events, self.events = self.events, []
            bodies = {h: "\n".join(self.lines(h, ts_ns, events)).encode() + b"\n"
                      for h in self.nodes}
        for h, ps in self.pushers.items():
            body = gzip.compress(bodies[h], 1)
            for p in ps:
                self._senders[id(p)].submit(self._send, p, body)
        if self.relay is not None:
            pusher, hosts = self.relay
            body = b"".join(bodies[h] for h in hosts)
            self._senders[id(pusher)].submit(self._send, pusher, gzip.compress(body, 1))
            self.relay_pushes += 1
        self.rounds += 1

    def _all_pushers(self) -> list[LedgerPusher]:
        return [p for ps in self.pushers.values() for p in ps] + (
            [self.relay[0]] if self.relay is not None else [])

    def _send(self, pusher: LedgerPusher, body: bytes) -> None:
        """Push; a push to be retried (the target down, or a shard that stored its own part of
        a relay's body but could not forward the rest to a killed shard: 503 until the map
        moves) is resent until stored, as the agent's spool or Telegraf would resend it. A
        resend doubles nothing (last write wins); a body stored in part and never resent
        would be counted as doubled."""
        deadline = time.time() + RETRY_FOR_S
        while pusher.push(body).outcome is Outcome.RETRY:
            if self._stop.is_set() or time.time() > deadline:
                log.info("a push to %s was not stored in %.0f s", pusher.url, RETRY_FOR_S)
                return
            time.sleep(1.0)

    def _run(self) -> None:
        step = self.step_s
        while not self._stop.is_set():
            ts = (int(time.time() / step) + 1) * step  # every target gets the same times
            if self._stop.wait(max(0.0, ts - time.time())):
                return
            try:
                self.round(ts)
            except Exception:  # a bench bug: logged, the next round still runs
                log.exception("an agent round failed")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        for sender in self._senders.values():
            sender.shutdown(wait=True, cancel_futures=True)
        for ps in self.pushers.values():
            for p in ps:
                p.close()
        if self.relay is not None:
            self.relay[0].close()
