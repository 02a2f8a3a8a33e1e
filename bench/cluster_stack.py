"""The processes of bench.cluster, all on loopback: Debian's PostgreSQL (tests.postgres), influxd
(tests.influx.server), the soak's webhook receiver (bench.soak_receiver: every notification
and every remediation call, recorded), and `gpuhealth serve` replicas (bench.soak_stack.Proc,
so each can be `kill -9`ed and restarted on its own data directory) sharing one PostgreSQL
schema and one InfluxDB database, each with its `cluster` settings."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from bench.soak_probe import parse_metrics
from bench.soak_receiver import NoPages, Receiver
from bench.soak_stack import HOOK_SECRET, NOTIFY_SECRET, Proc, wait_healthy
from tests.influx.server import InfluxServer, free_port
from tests.postgres import PostgresServer

log = logging.getLogger(__name__)
CLK_TCK = 100  # /proc/<pid>/stat ticks per second (sysconf CLK_TCK on Linux)


@dataclass(frozen=True, slots=True)
class Timers:
    """What bench.cluster shortens: the lease (shipped: 15 s / 5 s) and how long a failure
    must stay gone before its alert resolves (shipped: 300 s), and with it how long an Xid
    keeps its risk."""

    step_s: float = 5.0
    lease_ttl_s: float = 15.0
    lease_renew_s: float = 5.0
    resolve_s: float = 15.0

    @property
    def xid_hold_s(self) -> float:
        """How long an Xid keeps its risk (shipped: an hour): past the longest gap without a
        writer (an Xid logged just after the kill is scored once the standby writes), short
        enough that its alert resolves within the round."""
        return 2 * self.lease_ttl_s + 3 * self.step_s


class Replica:
    """One `gpuhealth serve` process: shard `shard_id`, its own port and data directory."""

    def __init__(self, name: str, shard_id: str, root: Path) -> None:
        self.name, self.shard_id = name, shard_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = root / f"{name}.yaml"
        self.data_dir = root / name
        argv = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
                "sys.exit(main())", "--log-level", "INFO", "serve", "--config", str(self.config)]
        self.proc = Proc(name, argv, root / f"{name}.log")
        self.starts = 0

    def start(self, wait: bool = True) -> None:
        self.proc.start()
        self.starts += 1
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        wait_healthy(self.proc, self.url)

    def holds(self, holder: str) -> bool:
        """Whether a lease `holder` (default replica id: host:port:pid) is this process."""
        return holder.split(":")[-2:] == [str(self.port), str(self.proc.pid)]

    def cpu_s(self) -> float:
        """User + system CPU seconds the process used so far (/proc/<pid>/stat)."""
        pid = self.proc.pid
        if pid is None:
            return 0.0
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)

    def rss_bytes(self) -> int:
        pid = self.proc.pid
        if pid is None:
            return 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def metrics(self) -> dict[str, float]:
        """From /metrics: samples ingested, write answers by status (`write_<code>`) and the GPUs
        its window store scores (`gpus_held`)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        out = parse_metrics(text)
        for line in text.splitlines():
            if line.startswith("gpuhealth_write_requests_total{"):
                code = line.split('code="', 1)[1].split('"', 1)[0]
                out[f"write_{code}"] = float(line.rsplit(" ", 1)[1])
            elif line.startswith('gpuhealth_entities{scope="gpu"}'):
                out["gpus_held"] = float(line.rsplit(" ", 1)[1])
        return out


def replica_config(r: Replica, dsn: str, influx_url: str, receiver_url: str, t: Timers,
                   shards: list[Replica], fleet: str, membership: bool = False
                   ) -> dict[str, Any]:
    """Rules only (no model: the failures injected are hard ones), PostgreSQL for the shared
    state, the webhook receiver and the webhook remediation hook in auto mode pointed at the
    bench's receiver, timers shortened so that a run sees pages resolve, and the breaker and
    attempt limits opened because the bench fails GPUs of a small fleet on purpose. `fleet`: the
    InfluxDB `cluster` tag, one per scenario, so a scenario's warm start never reads another's
    nodes. `membership`: live membership in PostgreSQL, this replica advertising its URL (the
    map is the one the leader publishes; `shards` is then unused)."""
    cluster: dict[str, Any] = {"shard_id": r.shard_id, "lease_ttl_s": t.lease_ttl_s,
                               "lease_renew_s": t.lease_renew_s}
    if membership:
        cluster |= {"membership": "postgres", "advertise_url": r.url}
    elif shards:
        cluster["shards"] = [{"id": s.shard_id, "url": s.url} for s in shards]
    return {
        "service": {"host": "127.0.0.1", "port": r.port, "collect_interval_s": t.step_s,
                    "score_interval_s": t.step_s},
        "storage": {"data_dir": str(r.data_dir), "postgres": {"dsn": dsn},
                    "influxdb": {"url": influx_url, "database": "gpuhealth",
                                 "cluster": fleet}},
        "alerts": {"resolve_for_s": t.resolve_s, "dwell_s": [0, t.resolve_s, t.resolve_s]},
        "detectors": {"hard": {"xid_hold_s": t.xid_hold_s}, "model": {"path": ""}},
        "cluster": cluster,
        "notify": {
            "external_url": r.url,
            "receivers": [{"name": "pager", "type": "webhook",
                           "config": {"url": f"{receiver_url}/notify", "secret": NOTIFY_SECRET}}],
            "route": {"receiver": "record", "group_by": ["node"], "group_wait_s": 1,
                      "group_interval_s": t.step_s, "repeat_interval_s": 86400,
                      "routes": [{"matchers": ["level>=3"], "receiver": "pager"}]},
            "storm": {"min_nodes": 100000},
        },
        "remediation": {"mode": "auto", "hook": "webhook",
                        "hook_config": {"url": f"{receiver_url}/remediate",
                                        "secret": HOOK_SECRET},
                        "breaker_max_fraction": 1.0, "breaker_max_nodes": 100000,
                        "max_attempts_per_node": 1000},
    }


class ClusterStack:
    """PostgreSQL, influxd and the receiver, started once; replicas added per scenario, each
    scenario on a fresh PostgreSQL schema."""

    def __init__(self, root: Path, timers: Timers) -> None:
        self.root, self.timers = root, timers
        # Not under `root`: as root the server runs as `postgres`, which must reach its data.
        self.pg_root = Path(tempfile.mkdtemp(prefix="gpuhealth-cluster-pg-"))
        self.pg = PostgresServer(self.pg_root)
        self.influx = InfluxServer(root / "influxd")
        self.receiver = Receiver(NoPages(), root / "received.jsonl")
        self.replicas: list[Replica] = []
        self.dsn = ""

    def start(self) -> None:
        self.receiver.start()
        self.pg.start()
        self.influx.start()

    def scenario(self, fleet: str, names: list[tuple[str, str]], sharded: bool,
                 membership: bool = False) -> list[Replica]:
        """Replicas (name, shard id) of fleet `fleet` on a fresh schema, configured and
        started together (`membership`: live, in PostgreSQL; else `sharded`: a static map of
        these replicas)."""
        self.dsn = self.pg.fresh_schema()
        new = [Replica(n, sid, self.root) for n, sid in names]
        shards = new if sharded else []
        for r in new:
            self._configure(r, shards, fleet, membership)
        self.replicas += new
        for r in new:
            r.start(wait=False)
        for r in new:
            r.wait_healthy()
        return new

    def add(self, fleet: str, name: str, shard_id: str) -> Replica:
        """One more replica on the current scenario's schema, with live membership; configured,
        not started (the caller times its start)."""
        r = Replica(name, shard_id, self.root)
        self._configure(r, [], fleet, membership=True)
        self.replicas.append(r)
        return r

    def _configure(self, r: Replica, shards: list[Replica], fleet: str,
                   membership: bool) -> None:
        cfg = replica_config(r, self.dsn, self.influx.url, self.receiver.url, self.timers,
                             shards, fleet, membership)
        r.config.write_text(yaml.safe_dump(cfg, sort_keys=False))

    def stop_replicas(self) -> None:
        for r in self.replicas:
            r.proc.stop(timeout_s=10)
        self.replicas = []

    # ---- reading the shared state --------------------------------------------------------------
    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return list(conn.execute(sql).fetchall())

    def lease(self, name: str) -> tuple[str, int] | None:
        """(holder, epoch) of lease `name` while it is held (database clock), else None."""
        rows = self.query(
            "SELECT holder, epoch FROM cluster_lease WHERE name = '" + name.replace("'", "''")
            + "' AND expires_at > EXTRACT(EPOCH FROM clock_timestamp())")
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def lease_taken(self, name: str) -> tuple[str, int, float] | None:
        """(holder, epoch, acquired_at) of lease `name` as the row says, held or run out; the
        time on the database's clock (this machine's: PostgreSQL is on loopback)."""
        rows = self.query("SELECT holder, epoch, acquired_at FROM cluster_lease WHERE name = '"
                          + name.replace("'", "''") + "'")
        return (str(rows[0][0]), int(rows[0][1]), float(rows[0][2])) if rows else None

    def shard_map(self) -> tuple[int, dict[str, str]]:
        """(epoch, shard id -> URL) of the map the leader published; (0, {}) before one."""
        rows = self.query("SELECT epoch, members FROM cluster_map WHERE name = 'shards'")
        if not rows:
            return 0, {}
        return int(rows[0][0]), {str(m["id"]): str(m["url"]) for m in json.loads(rows[0][1])}

    def breaker(self) -> tuple[tuple[Any, ...], frozenset[tuple[Any, ...]]]:
        """The breaker's state row and its window of actions."""
        (state,) = self.query("SELECT state, reason, tripped_at, tripped_by, reset_at, reset_by "
                              "FROM breaker_state WHERE id = 1")
        window = self.query("SELECT node, action_id, at FROM breaker_window")
        return tuple(state), frozenset(tuple(w) for w in window)

    def pg_writes(self) -> tuple[float, float]:
        """(transactions committed, rows inserted + updated) in the database so far."""
        (row,) = self.query(f"SELECT xact_commit, tup_inserted + tup_updated FROM "
                            f"pg_stat_database WHERE datname = '{self.pg.database}'")
        return float(row[0]), float(row[1])

    def influx_points(self) -> float:
        """Points InfluxDB was asked to write so far (its /debug/vars `write.pointReq`)."""
        got = httpx.get(f"{self.influx.url}/debug/vars", timeout=10).json()
        return float(got["write"]["values"]["pointReq"])

    def close(self) -> None:
        """Stop everything that still runs; safe to call twice and from a failure path."""
        for r in self.replicas:
            with contextlib.suppress(Exception):
                r.proc.stop(timeout_s=10)
        for stop in (self.influx.stop, self.pg.stop, self.receiver.stop):
            with contextlib.suppress(Exception):
                stop()
        shutil.rmtree(self.pg_root, ignore_errors=True)
