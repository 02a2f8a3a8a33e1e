"""Telegraf as a sender, for the soak's `telegraf` nodes: every round the `nvidia_smi` and
`infiniband` lines Telegraf would flush, POSTed to the service's `/write?db=telegraf` as
Telegraf's influxdb output does (gzip), with its buffer: a batch that meets a connection error
or a 5xx is kept and retried oldest first; a 4xx drops it (Telegraf logs and drops it too).

On the schedule it also sends what real Telegraf deployments send: an identical batch again
(a retried flush), a second point inside one 5-s step (an interval under 5 s), a point older
than the last one (out of order), and lines that are bad on purpose, each alone in its request
so that whatever the service refuses there is known to be intended.

Every batch the service answered goes to a ledger in bench.soak_agent's format, with a
`#kind` line: normal, resend, substep, late, or bad.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.soak_fleet import Fleet

log = logging.getLogger(__name__)
BUFFER_BATCHES = 1000  # Telegraf's metric_buffer_limit, in batches

# Each alone in its own request. The names are what issue 13 (defect 9) lists: a Slurm hostlist
# expression and an option-like host; the last is a value no float holds.
BAD_LINES = (
    "this is not line protocol",
    "gpu,host=gpu[001-512],gpu=0 ecc_dbe_volatile=1i {ts}",
    "gpu,host=--all,gpu=0 ecc_dbe_volatile=1i {ts}",
    "gpu,host={node},gpu=0 gpu_temp=1" + "0" * 400 + " {ts}",
)


@dataclass(slots=True)
class Batch:
    kind: str
    lines: list[str]


class TelegrafSender:
    def __init__(self, fleet: Fleet, nodes: list[str], url: str, ledger: Path,
                 step_s: float, alive: Callable[[str, float], bool]) -> None:
        self.fleet, self.nodes, self.ledger, self.step_s = fleet, nodes, ledger, step_s
        self.url = f"{url}/write?db=telegraf"
        self.alive = alive  # (node, now) -> whether the node exists now
        self.client = httpx.Client(timeout=10.0)
        self.buffer: deque[Batch] = deque(maxlen=BUFFER_BATCHES)
        self.last: dict[str, tuple[int, Batch]] = {}  # node -> (ts_ns, batch) of the last round
        self.pending: list[tuple[str, str]] = []  # (what, node) from the schedule
        self.lock = threading.Lock()
        self.stats = {"batches": 0, "dropped_4xx": 0, "retries": 0, "bad_sent": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telegraf", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()

    def inject(self, what: str, node: str) -> None:
        with self.lock:
            self.pending.append((what, node))

    def _run(self) -> None:
        next_at = time.time()
        while not self._stop.is_set():
            now = time.time()
            ts_ns = int(now * 1e9)
            for node in self.nodes:
                if self.alive(node, now):
                    b = Batch("normal", self.fleet.telegraf(node, ts_ns))
                    self.last[node] = (ts_ns, b)
                    self.buffer.append(b)
            with self.lock:
                todo, self.pending = self.pending, []
            for what, node in todo:
                self._extra(what, node)
            self._flush()
            next_at += self.step_s
            self._stop.wait(max(0.0, next_at - time.time()))
        self._flush()  # what is buffered still goes, as Telegraf flushes on shutdown

    def _extra(self, what: str, node: str) -> None:
        if node not in self.last:
            return
        ts_ns, batch = self.last[node]
        if what == "tg_resend":
            self.buffer.append(Batch("resend", list(batch.lines)))
        elif what in ("tg_substep", "tg_out_of_order"):
            shift = 2_000_000_000 if what == "tg_substep" else -12_000_000_000
            kind = "substep" if what == "tg_substep" else "late"
            self.buffer.append(Batch(kind, self.fleet.telegraf(node, ts_ns + shift)))
        elif what == "bad_lines":
            for line in BAD_LINES:
                self.buffer.append(Batch("bad", [line.format(ts=ts_ns, node=node)]))
                self.stats["bad_sent"] += 1

    def _flush(self) -> None:
        while self.buffer:
            b = self.buffer[0]
            body = gzip.compress(("\n".join(b.lines) + "\n").encode())
            try:
                r = self.client.post(self.url, content=body, headers={
                    "Content-Encoding": "gzip", "Content-Type": "text/plain; charset=utf-8",
                    "User-Agent": "Telegraf/1.33.0 Go/1.23.4"})
            except httpx.HTTPError as exc:
                self.stats["retries"] += 1
                log.debug("telegraf: write failed, kept: %s", exc)
                return
            if r.status_code >= 500:
                self.stats["retries"] += 1
                return
            self.buffer.popleft()
            self.stats["batches"] += 1
            if 400 <= r.status_code < 500:
                self.stats["dropped_4xx"] += 1
            self._log(b, r)

    def _log(self, b: Batch, r: httpx.Response) -> None:
        with self.ledger.open("a") as fh:
            fh.write(f"#push {time.time():.6f} {r.status_code}\n#kind {b.kind}\n")
            fh.write("".join(line + "\n" for line in b.lines))
            if r.status_code == 400:
                try:
                    answer = r.json()
                except ValueError:
                    answer = {"error": r.text[:2000]}
                fh.write("#rej " + json.dumps(answer) + "\n")
