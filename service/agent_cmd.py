"""`gpuhealth agent` (run the collectors on a GPU node and push line protocol to the service or
InfluxDB) and `gpuhealth parse` (print what a collector reads from captured output)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
import time
from pathlib import Path

from collectors import registry
from collectors.agent.loop import Agent
from collectors.agent.push import Pusher
from collectors.agent.spool import Spool
from collectors.base import Collector
from collectors.lpformat import format_points
from service.cli import register


def _configure_agent(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="write endpoint: http://SERVICE:8080/write, or InfluxDB's "
                                 "http://HOST:8086/write?db=gpuhealth or /api/v2/write?...")
    p.add_argument("--token", help="write token (Authorization: Token ...)")
    p.add_argument("--source", action="append", default=[],
                   help=f"source to run (repeatable; default: every one this host has). "
                        f"Known: {', '.join(sorted(registry.SOURCES))}")
    p.add_argument("--host", default=socket.gethostname(), help="node name to tag samples with")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between rounds")
    p.add_argument("--spool", type=Path, default=Path("var/agent-spool"),
                   help="on-disk buffer for rounds the target has not taken yet")
    p.add_argument("--spool-mb", type=int, default=256, help="spool bound; oldest dropped first")
    p.add_argument("--once", action="store_true", help="collect one round and stop")
    p.add_argument("--stdout", action="store_true", help="print line protocol instead of pushing")


def _collectors(args: argparse.Namespace) -> list[Collector]:
    names = args.source or registry.detected()
    if not names:
        raise SystemExit("no source found on this host; name one with --source")
    return [registry.get(n).build(args.host, {}) for n in names]


def _run_agent(args: argparse.Namespace) -> int:
    collectors = _collectors(args)
    if args.stdout:
        agent = Agent(collectors, Spool(args.spool, args.spool_mb << 20), None,
                      interval_s=args.interval)
        while True:
            for line in agent.lines():
                print(line)
            sys.stdout.flush()
            if args.once:
                return 0
            time.sleep(args.interval)
    if not args.url:
        raise SystemExit("--url is required unless --stdout")
    agent = Agent(collectors, Spool(args.spool, args.spool_mb << 20),
                  Pusher(args.url, token=args.token), interval_s=args.interval)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with contextlib.suppress(KeyboardInterrupt):
        agent.run(lambda: bool(stopping), rounds=1 if args.once else None)
    s = agent.stats
    print(f"agent: {s.rounds} rounds, {s.lines} lines, {s.segments_sent} segments sent, "
          f"{agent.spool.stats.segments} spooled, {s.segments_dropped} dropped", file=sys.stderr)
    return 0


def _configure_parse(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help=f"one of: {', '.join(sorted(registry.SOURCES))}")
    p.add_argument("files", nargs="+", type=Path, help="captured outputs")
    p.add_argument("--host", default="node", help="node name to tag samples with")


def _run_parse(args: argparse.Namespace) -> int:
    source = registry.get(args.source)
    ts_ns = time.time_ns()
    failed = 0
    for f in args.files:
        try:
            points = source.parse(f, args.host, ts_ns)
        except (ValueError, OSError) as exc:
            print(f"{f}: {exc}", file=sys.stderr)
            failed += 1
            continue
        for line in format_points(points):
            print(line)
    return 1 if failed else 0


register("agent", _configure_agent, _run_agent,
         "run collectors on a GPU node and push line protocol to the service or InfluxDB")
register("parse", _configure_parse, _run_parse,
         "print, as line protocol, what a source reads from captured output")
