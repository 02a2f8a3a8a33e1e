"""`gpuhealth agent` (run the collectors on a GPU node and push line protocol to the service or
InfluxDB), `gpuhealth agent relay` (take a rack's agents' pushes and send the service one body
per interval: collectors.agent.relay) and `gpuhealth parse` (print what a collector reads from
captured output)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from collectors import registry
from collectors.agent.identity_gate import IDENTITY_EVERY_S
from collectors.agent.loop import Agent
from collectors.agent.push import Pusher
from collectors.agent.report import Progress, failed_lines, found_lines, survey
from collectors.agent.spool import Spool
from collectors.base import Collector
from collectors.lineprotocol_format import format_points
from collectors.replay import ReplaySource
from collectors.trace import TraceReader
from service.commands.cli import register
from service.commands.usage import UsageError, source_name, trace_missing


def _configure_agent(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", action="append",
                   help="write endpoint: http://SERVICE:8080/write, or InfluxDB's "
                        "http://HOST:8086/write?db=gpuhealth or /api/v2/write?...; repeat it "
                        "to send every round to each (an HA pair's two replicas), each with "
                        "a spool of its own (--spool, then --spool-2, ...)")
    p.add_argument("--token", default=None,
                   help="write token (Authorization: Token ...); default $GPUHEALTH_AGENT_TOKEN, "
                        "or the file $GPUHEALTH_AGENT_TOKEN_FILE names (a token on the command "
                        "line shows in ps: prefer the file)")
    p.add_argument("--source", action="append", default=[], type=source_name,
                   help=f"source to run (repeatable; default: every one this host has). "
                        f"Known: {', '.join(sorted(registry.SOURCES))}")
    p.add_argument("--host", default=socket.gethostname(), help="node name to tag samples with")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between rounds")
    p.add_argument("--identity-every-s", type=float, default=IDENTITY_EVERY_S, metavar="SECONDS",
                   help="a GPU's identity (UUID, serial, PCI bus id, model, VBIOS, driver) "
                        "goes when new or changed, and unchanged again after this long, so "
                        f"a restarted service relearns it (default {IDENTITY_EVERY_S:g})")
    p.add_argument("--spool", type=Path, default=Path("var/agent-spool"),
                   help="on-disk buffer for rounds the target has not taken yet")
    p.add_argument("--spool-mb", type=int, default=256, help="spool bound; oldest dropped first")
    p.add_argument("--once", action="store_true",
                   help="collect one round and stop; exit 1 if no source could be read")
    p.add_argument("--stdout", action="store_true", help="print line protocol instead of pushing")
    r = p.add_argument_group("replay", "push a recorded or simulated trace instead of reading "
                                       "this host's sources (a demo cluster)")
    r.add_argument("--replay", type=Path, metavar="TRACE",
                   help="a trace directory or .lp/.lp.gz file (`gpuhealth simulate` writes one)")
    r.add_argument("--speed", type=float, default=1.0,
                   help="replay speed: 1 real time, 10 ten times faster, 0 as fast as possible")
    r.add_argument("--rebase-now", action="store_true",
                   help="shift the trace's timestamps so it plays as if happening now (needs "
                        "--speed 1: the service scores at the wall clock's time)")
    r.add_argument("--progress-s", type=float, default=10.0, metavar="SECONDS",
                   help="how often a replay prints its progress on stderr (rounds, lines, "
                        "segments sent, spool left, rate); default 10")
    r.add_argument("--backfill-s", type=float, default=0.0, metavar="SECONDS",
                   help="with --rebase-now: the trace starts this long ago; that part is "
                        "pushed at once as history, the rest in real time")
    sub = p.add_subparsers(dest="agent_mode", metavar="{relay}")
    _configure_relay(sub.add_parser(
        "relay", help="take node agents' pushes (point their --url here) and send the service "
                      "one body per interval"))


def _configure_relay(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True,
                   help="the service's write endpoint: http://SERVICE:8080/write")
    p.add_argument("--service-token", default=None,
                   help="write token for the service; default $GPUHEALTH_AGENT_TOKEN or the "
                        "file $GPUHEALTH_AGENT_TOKEN_FILE names")
    p.add_argument("--token", action="append",
                   default=[t for t in os.environ.get("GPUHEALTH_RELAY_TOKENS", "").split(",")
                            if t.strip()],
                   help="a token agents must send (repeatable); default "
                        "$GPUHEALTH_RELAY_TOKENS, comma-separated; none: any push is taken")
    p.add_argument("--listen", default="0.0.0.0", help="listen address (default all)")
    p.add_argument("--port", type=int, default=8186, help="listen port (default 8186)")
    p.add_argument("--node-name-from", default="host,Hostname", metavar="LABELS",
                   help="which labels name a Telegraf-scraped dcgm-exporter sample's node, "
                        "first first (the service's ingest.node_name_from; default "
                        "host,Hostname)")
    p.add_argument("--insecure", action="store_true",
                   help="listen beyond loopback with no --token")
    p.add_argument("--flush-ms", type=float, default=5000.0,
                   help="how often the pushes held are sent on, as one body (default 5000: "
                        "the agents' interval, one body per round; the service's cost is per "
                        "body)")
    p.add_argument("--spool", type=Path, default=Path("var/relay-spool"),
                   help="on-disk buffer for bodies the service has not taken yet")
    p.add_argument("--spool-mb", type=int, default=1024, help="spool bound; oldest dropped first")
    p.add_argument("--max-body-bytes", type=int, default=25_000_000,
                   help="a push's body limit, compressed and inflated (the service's "
                        "ingest.max_body_bytes)")
    p.add_argument("--max-lines", type=int, default=1_000_000,
                   help="lines (rows) per push (the service's ingest.max_lines_per_request)")


def _replay(args: argparse.Namespace) -> ReplaySource:
    if args.speed < 0 or args.backfill_s < 0:
        raise UsageError("--speed and --backfill-s must be 0 or more")
    if args.rebase_now and args.speed != 1:
        # Rebased samples carry wall-clock stamps: played faster they would run ahead of
        # the clock, and the service refuses samples from the future and two in one step.
        raise UsageError("--rebase-now replays in real time: leave --speed at 1")
    if args.backfill_s and not args.rebase_now:
        raise UsageError("--backfill-s needs --rebase-now")
    if args.source:
        raise UsageError("--replay and --source exclude each other")
    # Whole steps since the epoch, as a live agent's rounds would roughly fall.
    step = args.interval
    start = math.floor((time.time() - args.backfill_s) / step) * step if args.rebase_now else None
    try:
        reader = TraceReader(args.replay, step_s=args.interval)
    except FileNotFoundError as exc:
        raise trace_missing(exc) from None
    return ReplaySource(reader, speed=args.speed, start_at=start)


def _say(lines: list[str]) -> None:
    for line in lines:
        print(f"gpuhealth agent: {line}", file=sys.stderr)


def _collectors(args: argparse.Namespace) -> list[Collector]:
    if args.replay is not None:
        return [_replay(args)]
    names = args.source
    if not names:  # each source found, and each skipped with why (collectors.agent.report)
        names, skipped = survey()
        _say(found_lines(names, skipped))
    if not names:
        raise UsageError(f"no source found on this host; name one with --source "
                         f"({', '.join(sorted(registry.SOURCES))})")
    return [registry.get(n).build(args.host, {}) for n in names]


def _check(args: argparse.Namespace) -> None:
    """Refuse what would fail later, or quietly: a busy loop, a URL nothing can reach."""
    if not args.interval > 0:
        raise UsageError(f"--interval {args.interval:g}: give a positive number of seconds")
    if not args.identity_every_s >= 0:
        raise UsageError(f"--identity-every-s {args.identity_every_s:g}: give 0 or more "
                         "seconds")
    if args.spool_mb < 1:
        raise UsageError(f"--spool-mb {args.spool_mb}: give 1 or more")
    if args.url and not args.stdout:
        for given in args.url:
            url = urlsplit(given)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise UsageError(f"--url {given!r}: give an http:// or https:// URL, e.g. "
                                 f"http://SERVICE:8080/write")
        if len(set(args.url)) != len(args.url):
            raise UsageError("--url: the same URL twice would send every round twice")
    elif not args.stdout:
        raise UsageError("--url is required unless --stdout")


def _spool(args: argparse.Namespace, n: int = 1) -> Spool:
    """The spool of the n-th --url: --spool itself for the first (what an agent with one
    target always used), --spool-N beside it for the others."""
    where = args.spool if n == 1 else args.spool.with_name(f"{args.spool.name}-{n}")
    if where.exists() and not where.is_dir():
        raise UsageError(f"--spool {where}: not a directory")
    try:
        return Spool(where, args.spool_mb << 20)
    except OSError as exc:
        raise UsageError(f"--spool {where}: {exc.strerror or exc}") from None


def _sources_down(collectors: list[Collector]) -> int:
    """After `--once`: say which sources were read and which failed and why (stderr); 1 when
    none could, so a check such as `agent --once --stdout` fails on a node whose sources are
    all gone, 0 when at least one was read."""
    down = [c for c in collectors if not c.status.up]
    _say(failed_lines(collectors))
    if down and len(down) == len(collectors):
        print(f"gpuhealth agent: no source produced data ({len(down)} down)", file=sys.stderr)
        return 1
    if down:
        print(f"gpuhealth agent: {len(collectors) - len(down)} of {len(collectors)} sources "
              f"read", file=sys.stderr)
    return 0


MAX_SECRET_BYTES = 64 * 1024
TOKEN_ENV = "GPUHEALTH_AGENT_TOKEN"


def env_secret(name: str) -> str | None:
    """$NAME, or the content of the file $NAME_FILE names (a compose or Kubernetes secret),
    its trailing newline stripped; None when neither is set. Both set is refused, and a file
    that cannot be read is named, never its content."""
    value, path = os.environ.get(name), os.environ.get(f"{name}_FILE")
    if value and path:
        raise UsageError(f"${name} and ${name}_FILE are both set: give one")
    if not path:
        return value or None
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"${name}_FILE: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise UsageError(f"${name}_FILE: {path} is over {MAX_SECRET_BYTES} bytes")
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise UsageError(f"${name}_FILE: {path} is empty")
    return text


def _run_relay(args: argparse.Namespace) -> int:
    from collectors.agent.relay import SPOOL_SUFFIX, Limits, Relay
    from collectors.agent.relay_http import RelayServer

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError("the relay needs pyarrow: pip install 'gpuhealth[agent,agent-arrow]'"
                         ) from None
    if args.service_token is None:
        args.service_token = env_secret(TOKEN_ENV)
    order = tuple(x.strip() for x in args.node_name_from.split(",") if x.strip())
    if not order:
        raise UsageError("--node-name-from: give at least one label, e.g. host,Hostname")
    url = urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise UsageError(f"--url {args.url!r}: give an http:// or https:// URL, e.g. "
                         f"http://SERVICE:8080/write")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: give a port from 1 to 65535")
    if not args.flush_ms > 0 or args.spool_mb < 1 or args.max_body_bytes < 1 or args.max_lines < 1:
        raise UsageError("--flush-ms, --spool-mb, --max-body-bytes and --max-lines: give "
                         "positive numbers")
    loopback = args.listen in ("127.0.0.1", "::1", "localhost")
    if not args.token and not loopback and not args.insecure:
        raise UsageError(f"--listen {args.listen} with no --token: any host could push; give "
                         f"--token (or $GPUHEALTH_RELAY_TOKENS), or --insecure")
    if args.spool.exists() and not args.spool.is_dir():
        raise UsageError(f"--spool {args.spool}: not a directory")
    spool = Spool(args.spool, args.spool_mb << 20, suffix=SPOOL_SUFFIX)
    relay = Relay(spool, Pusher(args.url, token=args.service_token), tokens=args.token,
                  limits=Limits(args.max_body_bytes, args.max_lines), flush_s=args.flush_ms / 1e3,
                  node_name_from=order)
    try:
        server = RelayServer(relay, args.listen, args.port)
    except OSError as exc:
        raise UsageError(f"--listen {args.listen} --port {args.port}: {exc.strerror or exc}"
                         ) from None
    server.start()
    print(f"relay: listening on {args.listen}:{server.port}, sending to {args.url} every "
          f"{args.flush_ms:g} ms", file=sys.stderr)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        with contextlib.suppress(KeyboardInterrupt):
            relay.run(lambda: bool(stopping))
    finally:
        server.shutdown()
        server.server_close()
        relay.flush()  # what came in while stopping is spooled, sent at the next start
    s = relay.stats
    print(f"relay: {s.pushes} pushes taken, {s.refused} refused, {s.bodies_sent} bodies sent, "
          f"{spool.stats.segments} spooled, {s.bodies_dropped} dropped", file=sys.stderr)
    return 0


def _run_agent(args: argparse.Namespace) -> int:
    if getattr(args, "agent_mode", None) == "relay":
        return _run_relay(args)
    if args.token is None:
        args.token = env_secret(TOKEN_ENV)
    _check(args)
    # Spools first: a bad --spool is refused before the sources are surveyed and listed.
    spool = _spool(args)
    more = [] if args.stdout else [(_spool(args, n), u)
                                   for n, u in enumerate(args.url[1:], start=2)]
    collectors = _collectors(args)
    replaying = args.replay is not None
    # A replay paces itself (ReplaySource sleeps until each round is due) and ends; --once
    # has no next round to wait for.
    interval = 0.0 if replaying or args.once else args.interval

    def exhausted() -> bool:
        return replaying and all(c.status.exhausted for c in collectors)

    if args.stdout:
        agent = Agent(collectors, spool, None, interval_s=interval, host=args.host,
                      identity_every_s=args.identity_every_s)
        while True:
            for line in agent.lines():
                print(line)
            sys.stdout.flush()
            if args.once:
                return _sources_down(collectors)
            if exhausted():
                return 0
            time.sleep(interval)
    agent = Agent(collectors, spool, Pusher(args.url[0], token=args.token),
                  interval_s=interval, host=args.host, identity_every_s=args.identity_every_s,
                  also=[(sp, Pusher(u, token=args.token)) for sp, u in more])
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # A replay or backfill runs for minutes: a line every --progress-s says how far it is.
    progress = Progress(agent, sys.stderr, every_s=args.progress_s) if replaying else None
    with contextlib.suppress(KeyboardInterrupt):
        agent.run(lambda: bool(stopping) or exhausted(), rounds=1 if args.once else None,
                  each_round=progress)
        # A finished replay still owes the target what is spooled; a live agent keeps it.
        while exhausted() and not stopping and any(t.spool.oldest() is not None
                                                    for t in agent.targets):
            if not agent.flush():
                time.sleep(1.0)
            if progress is not None:
                progress()
    s = agent.stats
    spooled = sum(t.spool.stats.segments for t in agent.targets)
    print(f"agent: {s.rounds} rounds, {s.lines} lines, {s.segments_sent} segments sent, "
          f"{spooled} spooled, {s.segments_dropped} dropped", file=sys.stderr)
    return _sources_down(collectors) if args.once else 0


def _configure_parse(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", type=source_name,
                   help=f"one of: {', '.join(sorted(registry.SOURCES))}")
    p.add_argument("files", nargs="+", type=Path, help="captured outputs")
    p.add_argument("--host", default="node", help="node name to tag samples with")


def _run_parse(args: argparse.Namespace) -> int:
    """Points on stdout; per file on stderr, what was read, refused (and why) and noted. Exits
    1 when some file could not be read or gave nothing but refusals."""
    try:
        source = registry.get(args.source)
    except KeyError as exc:  # "unknown source 'foo' (known: ...)"
        raise SystemExit(f"gpuhealth parse: {exc.args[0]}") from None
    ts_ns = time.time_ns()
    failed = 0
    for f in args.files:
        try:
            got = source.parse(f, args.host, ts_ns)
        except OSError as exc:
            print(f"{f}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            failed += 1
            continue
        except ValueError as exc:
            print(f"{f}: nothing recognised as {args.source} output: {exc}", file=sys.stderr)
            failed += 1
            continue
        for line in format_points(got.points):
            print(line)
        for line in parse_report(f, got):
            print(line, file=sys.stderr)
        failed += not got.points and bool(got.rejected)
    return 1 if failed else 0


MAX_REASONS = 20  # per file; a flood of one refusal is summed up by the count line


def parse_report(path: Path, got: registry.Parsed) -> list[str]:
    """What `parse` says on stderr about one file: counts, then each refusal and note."""
    n, r = len(got.points), len(got.rejected)
    out = [f"{path}: {n} point{'s' * (n != 1)} read, {r} refused"]
    out += [f"{path}: refused: {x}" for x in got.rejected[:MAX_REASONS]]
    if r > MAX_REASONS:
        out.append(f"{path}: ... and {r - MAX_REASONS} more refused")
    out += [f"{path}: note: {x}" for x in got.notes]
    return out


register("agent", _configure_agent, _run_agent,
         "run collectors on a GPU node and push line protocol to the service or InfluxDB "
         "(`agent relay`: a rack's relay)")
register("parse", _configure_parse, _run_parse,
         "print, as line protocol, what a source reads from captured output")
