"""A cold start behind a relay, for tests/collectors/agent/test_relay_cold_start.py and
bench.cold_start_relay: the real service (`gpuhealth serve`, a subprocess on loopback, its
embedded SQLite store), one real relay (RelayServer on loopback, its flush loop in a thread),
node agents' pushes of one round of every node through the relay, and every sample read back
from the service's store once it has stopped."""

from __future__ import annotations

import gzip
import math
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from collectors.agent.push import Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Relay
from collectors.agent.relay_http import RelayServer
from collectors.agent.spool import Spool
from collectors.catalog import CATALOG, Scope
from collectors.schema import SchemaMapper, batch_to_lines
from service.storage import sample_codec
from tests.collectors.agent.relay_service import free_port, samples
from tests.loopback import Daemon, answers
from tests.support.fleet import Fleet

CLI = "import sys; from service.commands.cli import main; sys.exit(main())"
Sample = tuple[str, float, str, float]


@dataclass
class Run:
    sent: set[Sample]
    stored: set[Sample]
    admit_s: float  # from the relay's first forward to its spool empty
    bodies_sent: int
    forward_failures: int  # answers the relay had to send again (503 while pending)
    relay: dict[str, Any]


def node_bodies(nodes: int, gpus: int, links: int, ts: float) -> list[bytes]:
    """One round: each node's line protocol, as its agent pushes it (gzip)."""
    out = []
    for i in range(nodes):
        text = "".join(ln + "\n" for ln in batch_to_lines(
            Fleet({f"cs{i:05d}": gpus}, links=links).batch(ts)))
        out.append(gzip.compress(text.encode(), compresslevel=1))
    return out


def expected(bodies: list[bytes]) -> set[Sample]:
    got: set[Sample] = set()
    mapper = SchemaMapper(strict=False)
    for b in bodies:
        got.update(samples(mapper.parse(gzip.decompress(b), max_bytes=None)))
    return got


def stored(db_path: Path) -> set[Sample]:
    """Every sample the service's SQLite store holds (written rows and resent ones)."""
    out: set[Sample] = set()
    db = sqlite3.connect(db_path)
    try:
        for scope in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT):
            layout = [r[0] for r in db.execute(f"SELECT name FROM {scope}_layout ORDER BY pos")]
            for key, ts, vals in db.execute(
                    f"SELECT e.entity, s.ts, s.vals FROM {scope}_samples s JOIN "
                    f"{scope}_entities e ON s.id = e.id WHERE s.gone = 0"):
                for name, v in zip(layout, sample_codec.decode_all(vals, len(layout)),
                                   strict=True):
                    if not math.isnan(v):
                        out.add((key, float(ts), name, float(v)))
            cols = [m.name for m in CATALOG.columns(scope)]
            for row in db.execute(f"SELECT ts, entity, {', '.join(cols)} FROM {scope}_late"):
                for name, v in zip(cols, row[2:], strict=True):
                    if v is not None:
                        out.add((row[1], float(row[0]), name, float(v)))
    finally:
        db.close()
    return out


@contextmanager
def service(root: Path, *, tokens: list[str] | None = None,
            ingest: dict[str, Any] | None = None) -> Iterator[tuple[str, Path]]:
    """`gpuhealth serve` on loopback: (its /write URL, its SQLite file), stopped (SIGTERM)
    on the way out so the store is whole when read."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cfg = {"service": {"host": "127.0.0.1", "port": port},
           "ingest": {**(ingest or {}), **({"tokens": tokens} if tokens else {})},
           "storage": {"data_dir": str(root / "var")},
           "detectors": {"model": {"path": "none"}}}
    (root / "gpuhealth.yaml").write_text(yaml.safe_dump(cfg))
    d = Daemon(root, "service")
    d.launch([sys.executable, "-c", CLI, "--log-level", "WARNING", "serve", "--config",
              str(root / "gpuhealth.yaml"), "--port", str(port)],
             answers(f"http://127.0.0.1:{port}/healthz"), timeout_s=120)
    try:
        yield f"http://127.0.0.1:{port}/write", root / "var" / "gpuhealth.db"
    finally:
        d.stop()


def cold_start(root: Path, nodes: int = 1_250, gpus: int = 8, links: int = 2, *,
               token: str | None = None, ingest: dict[str, Any] | None = None,
               deadline_s: float = 600.0) -> Run:
    """One round of `nodes` agents through a relay to a service that has never met them."""
    ts = math.floor(time.time() / 5) * 5.0
    bodies = node_bodies(nodes, gpus, links, ts)
    with service(root / "service", tokens=[token] if token else None, ingest=ingest) as (
            url, db):
        spool = Spool(root / "relay-spool", 1 << 30, suffix=SPOOL_SUFFIX)
        relay = Relay(spool, Pusher(url, token=token, timeout_s=120), flush_s=0.2)
        server = RelayServer(relay, "127.0.0.1", 0)
        server.start()
        try:
            with httpx.Client(timeout=60) as agent:
                for b in bodies:  # every node's round, held by the relay
                    r = agent.post(f"http://127.0.0.1:{server.port}/write", content=b,
                                   headers={"Content-Encoding": "gzip"})
                    assert r.status_code == 204, r.text
            stop = threading.Event()
            t0 = time.monotonic()
            loop = threading.Thread(target=relay.run, args=(stop.is_set,), daemon=True)
            loop.start()  # its first flush: one body of every node
            while (relay.stats.bodies_spooled == 0 or spool.stats.segments) and (
                    time.monotonic() - t0 < deadline_s):
                time.sleep(0.05)
            admit_s = time.monotonic() - t0
            stop.set()
            loop.join(timeout=60)
        finally:
            server.shutdown()
            server.server_close()
    return Run(expected(bodies), stored(db), admit_s, relay.stats.bodies_sent,
               relay.stats.forward_failures,
               {k: getattr(relay.stats, k) for k in relay.stats.__dataclass_fields__})
