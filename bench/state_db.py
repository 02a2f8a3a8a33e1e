"""What the shared state on PostgreSQL can take: write transactions of the stores replicas and
shards make every tick, against Debian's PostgreSQL on loopback.

    python -m bench.state_db [--writers 8] [--each 500] [--solo 2000] [--ticks 40]

Figures, from one run:
- one writer: the time of one write transaction (BEGIN, the shared-state advisory lock, an
  upsert, COMMIT: what a shard's census, a lease renewal or a notification-log write costs);
- many writers (one connection each, as shards are): transactions per second through the one
  write lock, the ceiling every replica of a fleet shares;
- an alert store's tick: `AlertStore.apply` of 50 level changes in one transaction.
The capacity model in docs/design.md ("Capacity") divides by these.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from collectors.catalog import Scope
from service.cluster.census import Census
from service.stages.alert_machine import Transition
from service.stages.alert_store import AlertStore
from tests.postgres import PostgresServer


def _one_writer(dsn: str, n: int) -> float:
    c = Census(dsn, "solo")
    try:
        t0 = time.perf_counter()
        for i in range(n):
            c.publish(i, 1)
        return (time.perf_counter() - t0) / n
    finally:
        c.close()


def _many_writers(dsn: str, writers: int, each: int) -> float:
    def run(k: int) -> None:
        c = Census(dsn, f"shard-{k}")
        try:
            for i in range(each):
                c.publish(i, 1)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(writers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return writers * each / (time.perf_counter() - t0)


def _alert_tick(dsn: str, changes: int, ticks: int) -> float:
    store = AlertStore(dsn)
    try:
        level = 0
        t0 = time.perf_counter()
        for k in range(ticks):
            new = 1 if level == 0 else 0
            store.apply([Transition(Scope.GPU, i, f"n{i // 8}:gpu{i % 8}", f"n{i // 8}", level,
                                    new, 1e9 + 5 * k, 0.5) for i in range(changes)], {})
            level = new
        return (time.perf_counter() - t0) / ticks
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--each", type=int, default=500)
    ap.add_argument("--solo", type=int, default=2000, help="transactions of the one writer")
    ap.add_argument("--ticks", type=int, default=40, help="alert ticks of 50 changes")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-"))
    try:
        server = PostgresServer(root)
        server.start()
        try:
            one = _one_writer(server.fresh_schema(), args.solo)
            many = _many_writers(server.fresh_schema(), args.writers, args.each)
            tick = _alert_tick(server.fresh_schema(), 50, args.ticks)
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"one writer: {one * 1e3:.2f} ms per write transaction")
    print(f"{args.writers} writers: {many:,.0f} write transactions/s through the one lock")
    print(f"an alert tick of 50 level changes: {tick * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
