"""Collector benchmark: the cost of scraping one 8-GPU node, parser throughput, and the
ingest endpoint at fleet scale.

    python -m bench.collectors [--runs 30] [--json]

1. Per-collector cost of one scrape of an 8-GPU node with fixture-driven sources: CPU time
   (this process, plus the CPU of child processes for nvidia-smi) and wall time, median of
   `--runs`. nvidia-smi is a fake shell script printing output built from the real captures
   (an H100 `--query-gpu` row, the A100 `-q -x` block) for 8 GPUs; dcgm-exporter is a real
   http.server on loopback serving the L4 page replicated to 8 GPUs; InfiniBand reads the real
   H100 sysfs tree; the kernel log is a file followed while real Xid lines are appended.
2. Parse throughput of each parser on the real captures.
3. The real service's /write on loopback: gzip line-protocol rounds of a simulated fleet posted
   by a client in another process, so this process's CPU time is the server's; projected to
   one 5-s round of a 10,000-GPU fleet, with and without per-link NVLink lines, the FastAPI
   route and the lean route (service.api.write_lean) alternating in one run, node agents' rounds
   also without the SQLite sink (whose cost is its own). Then the same
   rounds in-process, phase by phase (inflate, parse and map onto the catalog, window-store
   ingest, SQLite sink), with the reference point-by-point parse path beside the columnar fast
   path a mapper takes for layouts it has met (collectors.schema_fastpath).

Goals (reported, never asserted): one 8-GPU node scrape under 50 ms of CPU with the narrow
query; the endpoint takes a 10,000-GPU 5-s round of node agents in at most 0.5 s of CPU
(issue 18).
"""

from __future__ import annotations

import argparse
import gzip
import http.server
import json
import logging
import multiprocessing as mp
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import _fixtures as fx

NODE_GPUS = 8
FLEET_GPUS = 10_000
LINKS_PER_GPU = 18
ROUND_S = 5.0
SCRAPE_GOAL_CPU_S = 0.050
INGEST_GOAL_CPU_S = 0.5  # issue 18: 1,250 node agents (8 GPUs, per-link NVLink) per 5-s round
CLIENT_CONNECTIONS = 32  # concurrent senders' connections the client process keeps open


@dataclass
class Scrape:
    collector: str
    what: str
    samples: int
    cpu_s: float  # median: this process + children
    child_cpu_s: float  # median: children only (the fake nvidia-smi)
    wall_s: float
    up: bool
    note: str = ""


@dataclass
class ParseRate:
    parser: str
    input: str
    lines: int
    samples: int
    seconds_per_parse: float
    lines_per_s: float
    samples_per_s: float


@dataclass
class IngestRun:
    variant: str
    sim_gpus: int
    gpus_per_request: int
    requests: int
    lines: int
    samples: int
    gzip_bytes: int
    server_cpu_s: float
    client_wall_s: float
    lines_per_s_cpu: float
    samples_per_s_cpu: float
    lines_per_s_wall: float
    fleet_lines_per_round: int
    projected_cpu_s: float  # one 5-s round of the 10,000-GPU fleet
    projected_wall_s: float
    errors: int
    fastapi_cpu_s: float = 0.0  # the FastAPI route's projected CPU in the same configuration
    relays: int = 0  # agents post to relays (at the 10,000-GPU scale), which post to the service
    relay_cpu_s: float = 0.0  # the relays' CPU (rack hosts, not the service's), projected
    sim_relays: int = 0  # the relays the simulated slice ran (its requests: their bodies)
    rounds: int = 0  # measured rounds

    @property
    def bodies_per_relay_round(self) -> float:
        """Relay bodies the service took per relay per round (a 5-s flush at full scale: 1)."""
        return self.requests / (self.sim_relays * self.rounds) if self.sim_relays else 0.0


@dataclass
class IngestPhases:
    """CPU seconds of each /write phase, projected to one 5-s round of the 10,000-GPU fleet."""

    variant: str
    sim_gpus: int
    gpus_per_request: int
    fleet_lines_per_round: int
    inflate_s: float
    parse_map_s: float  # SchemaMapper.parse in steady state (fast path)
    parse_map_reference_s: float  # lineprotocol.parse + SchemaMapper.to_batch (every line)
    fast_share: float  # share of lines the fast path took
    ingest_s: float  # window store
    sink_s: float  # the SQLite sink (storage.write_samples, the embedded default)
    total_s: float  # inflate + parse_map + ingest + sink, without HTTP

    @property
    def parse_lines_per_s(self) -> float:
        return self.fleet_lines_per_round / self.parse_map_s


@dataclass
class Report:
    scrapes: list[Scrape] = field(default_factory=list)
    parsers: list[ParseRate] = field(default_factory=list)
    ingest: list[IngestRun] = field(default_factory=list)
    phases: list[IngestPhases] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# ---- timing -----------------------------------------------------------------------------------

def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _measure(fn: Callable[[], int], runs: int) -> tuple[int, float, float, float]:
    """Median (cpu incl. children, child cpu, wall) of `runs` calls; fn returns samples."""
    cpu: list[float] = []
    child: list[float] = []
    wall: list[float] = []
    samples = 0
    fn()  # warm-up: imports, first connections, caches
    for _ in range(runs):
        c0, k0, w0 = time.process_time(), _child_cpu(), time.perf_counter()
        samples = fn()
        w1, k1, c1 = time.perf_counter(), _child_cpu(), time.process_time()
        cpu.append((c1 - c0) + (k1 - k0))
        child.append(k1 - k0)
        wall.append(w1 - w0)
    return samples, statistics.median(cpu), statistics.median(child), statistics.median(wall)


def _rate(fn: Callable[[], int], min_s: float = 0.3) -> tuple[int, float]:
    """(samples, seconds per call) of fn, repeated for at least min_s of CPU."""
    samples = fn()
    n, t0 = 0, time.process_time()
    while True:
        fn()
        n += 1
        dt = time.process_time() - t0
        if dt >= min_s:
            return samples, dt / n


# ---- 1. one scrape of an 8-GPU node -----------------------------------------------------------

def _fake_smi(tmp: Path) -> Path:
    """A fake nvidia-smi: `-q -x` prints the 8-GPU XML, `--query-gpu` the 8-row CSV."""
    from collectors.nvidia_smi import DEFAULT_QUERY_FIELDS

    (tmp / "smi.xml").write_text(fx.a100_xml())
    (tmp / "smi.csv").write_text(fx.narrow_csv(DEFAULT_QUERY_FIELDS))
    script = tmp / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -q) exec cat '{tmp / "smi.xml"}' ;;
  --query-gpu=*) exec cat '{tmp / "smi.csv"}' ;;
esac
echo "fake nvidia-smi: unexpected $*" >&2
exit 2
""")
    script.chmod(0o755)
    return script


def _samples_of(c: Any) -> Callable[[], int]:
    return lambda: int(c.collect().samples)


class _Clock:
    def __init__(self, t: float, step: float) -> None:
        self.t, self.step = t, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def bench_nvidia_smi(tmp: Path, runs: int) -> list[Scrape]:
    from collectors.nvidia_smi import NvidiaSmiCollector

    smi = _fake_smi(tmp)
    out = []
    # Narrow round: the clock never reaches xml_interval after the first (warm-up) collect.
    for what, step in (("narrow --query-gpu (every round)", 0.0),
                       ("--query-gpu + -q -x (the minute round)", 61.0)):
        c = NvidiaSmiCollector(binary=str(smi), host="node0", clock=_Clock(1.7e9, step))
        samples, cpu, child, wall = _measure(_samples_of(c), runs)
        out.append(Scrape("nvidia-smi", what, samples, cpu, child, wall, c.status.up,
                          c.status.reason))
    return out


class _Page(http.server.BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def bench_dcgm(runs: int) -> Scrape:
    from collectors.dcgm import DcgmExporterCollector

    handler = type("Page", (_Page,), {"page": fx.l4_page().encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        c = DcgmExporterCollector(url, host="node0")
        samples, cpu, child, wall = _measure(lambda: c.collect().samples, runs)
        c.close()
    finally:
        server.shutdown()
        server.server_close()
    return Scrape("dcgm-exporter", f"HTTP scrape, L4 page x{NODE_GPUS} GPUs "
                  "(server in this process: its CPU is counted too)", samples, cpu, child, wall,
                  c.status.up, c.status.reason)


def bench_infiniband(runs: int) -> Scrape:
    from collectors.infiniband import InfinibandCollector

    c = InfinibandCollector(fx.IB_H100, host="node0")
    samples, cpu, child, wall = _measure(lambda: c.collect().samples, runs)
    ports = sum(1 for _ in fx.IB_H100.glob("*/ports/*"))
    return Scrape("infiniband", f"sysfs read, real H100 tree ({ports} ports)", samples, cpu,
                  child, wall, c.status.up, c.status.reason)


def bench_kernel_log(tmp: Path, runs: int) -> Scrape:
    from collectors.kernel_log import KernelLogCollector

    xids = fx.xid_lines()
    per_round = 16  # a bad round: 2 Xid lines per GPU
    log = tmp / "kern.log"
    log.write_text("")
    c = KernelLogCollector.from_file("node0", log, boot_time=1.7e9,
                                     clock=lambda: 1.75e9)
    pos = [0]
    # The append is outside the timed call: write, then time the follow.
    cpu: list[float] = []
    wall: list[float] = []
    events = 0
    c.collect()
    for _ in range(runs + 1):
        chunk = [xids[(pos[0] + i) % len(xids)] for i in range(per_round)]
        pos[0] += per_round
        with log.open("a") as f:
            f.write("\n".join(chunk) + "\n")
        c0, w0 = time.process_time(), time.perf_counter()
        c.collect()
        w1, c1 = time.perf_counter(), time.process_time()
        events = len(c.last_events)
        cpu.append(c1 - c0)
        wall.append(w1 - w0)
    return Scrape("kernel-log", f"follow a file, {per_round} real Xid lines appended per round",
                  events, statistics.median(cpu[1:]), 0.0, statistics.median(wall[1:]),
                  c.status.up, c.status.reason or f"{events} coalesced Xid events per round")


# ---- 2. parser throughput ---------------------------------------------------------------------

def bench_parsers() -> list[ParseRate]:
    from collectors.dcgm import parse_exposition
    from collectors.infiniband import read_sysfs
    from collectors.kernel_log import parse_kernel_log
    from collectors.nvidia_smi import DEFAULT_QUERY_FIELDS, parse_query_csv, parse_text, parse_xml
    from collectors.schema import SchemaMapper

    ts = 1_750_000_000_000_000_000
    csv = fx.narrow_csv(DEFAULT_QUERY_FIELDS)
    xml1 = fx.A100_XML.read_text()
    xml8 = fx.a100_xml()
    text = fx.H100_TEXT.read_text()
    page = fx.l4_page()
    klog = fx.kernel_log_lines()
    lp = "\n".join(_fleet_lines(64 * NODE_GPUS, nvlink=True)[0]) + "\n"
    warm = SchemaMapper()
    warm.parse(lp)

    def nfields(points: list[Any]) -> int:
        return sum(len(p.fields) for p in points)

    cases: list[tuple[str, str, str, Callable[[], int]]] = [
        ("parse_query_csv", "narrow CSV, 8 GPUs (H100 values)", csv,
         lambda: nfields(parse_query_csv(csv, DEFAULT_QUERY_FIELDS, "h", ts))),
        ("parse_xml", "A100 -q -x (1 GPU, as captured)", xml1,
         lambda: nfields(parse_xml(xml1, "h", ts))),
        ("parse_xml", "A100 -q -x x8 GPUs", xml8, lambda: nfields(parse_xml(xml8, "h", ts))),
        ("parse_text", "H100 x8 -q text (gpud 535.183.01)", text,
         lambda: nfields(parse_text(text, "h", ts))),
        ("parse_exposition", "L4 dcgm-exporter page x8 GPUs", page,
         lambda: nfields(parse_exposition(page, "h", ts))),
        ("parse_kernel_log", "dmesg capture, 636 Xid lines", "\n".join(klog),
         lambda: len(parse_kernel_log(klog, "h", boot_time=1.7e9).events)),
        ("SchemaMapper.parse", "our line protocol, 64 nodes, first round (reference)", lp,
         lambda: SchemaMapper().parse(lp).samples),
        ("SchemaMapper.parse", "the same, a mapper that has met it (fast path)", lp,
         lambda: warm.parse(lp).samples),
    ]
    out = []
    for name, what, data, fn in cases:
        samples, sec = _rate(fn)
        lines = data.count("\n") + 1
        out.append(ParseRate(name, what, lines, samples, sec, lines / sec, samples / sec))
    ports = sum(1 for _ in fx.IB_H100.glob("*/ports/*"))
    files = sum(1 for p in fx.IB_H100.rglob("*") if p.is_file())
    samples, sec = _rate(lambda: nfields(read_sysfs(fx.IB_H100, "h", ts)))
    out.append(ParseRate("read_sysfs", f"real H100 tree: {ports} ports, {files} files "
                         "(lines = files)", files, samples, sec, files / sec, samples / sec))
    return out


# ---- 3. the ingest endpoint -------------------------------------------------------------------

def _fleet_lines(gpus: int, *, nvlink: bool, t0: float = 1.75e9,
                 rounds: int = 1) -> tuple[list[str], int]:
    """Line protocol of `rounds` rounds of a healthy fleet in our schema (per GPU one `gpu`
    line, per link one `nvlink` line unless nvlink=False, per IB port one `ib_port` line), and
    the number of samples (fields) in them."""
    from bench.pipeline import Fleet
    from collectors.catalog import Scope
    from collectors.schema import batch_to_lines

    fleet = Fleet(gpus)
    lines: list[str] = []
    samples = 0
    for k in range(rounds):
        b = fleet.round(t0 + ROUND_S * k)
        if not nvlink:
            b.frames.pop(Scope.NVLINK, None)
        samples += b.samples
        lines += batch_to_lines(b)
    return lines, samples


def _node_of(line: str) -> str:
    i = line.index("host=") + 5
    j = min(k for k in (line.find(",", i), line.find(" ", i)) if k >= 0)
    return line[i:j]


def _client(conn: Connection, url: str | list[str], gpus: int, per_request: int, rounds: int,
            nvlink: bool, t0: float, arrow: bool = False, gz: bool = True,
            relays: Connection | None = None, flush_s: float = ROUND_S) -> None:
    """The pushing side, in its own process: builds gzip bodies (one per `per_request` GPUs per
    round, as node agents or a Telegraf relay would), posts one warm-up round (the service
    meets every entity for the first time there), says ready, posts the rest on a go. Several
    URLs (relays): the nodes are dealt to them in turn (bench.collectors_relay.relay_of), and
    `relays` is told "flush" wherever a relay flushing every `flush_s` would in real time
    (bench.collectors_relay.flush_points), once what comes before is answered."""
    import httpx

    from bench.collectors_relay import flush_points, relay_of

    urls = [url] if isinstance(url, str) else url

    bodies: list[bytes] = []
    warmup: list[bytes] = []
    lines_n = 0
    samples = 0
    for k in range(rounds + 1):
        lines, s = _fleet_lines(gpus, nvlink=nvlink, t0=t0 + ROUND_S * k)
        if k:
            samples += s
            lines_n += len(lines)
        for text in _requests(lines, per_request):
            body = _payload(text, arrow)
            (bodies if k else warmup).append(gzip.compress(body, 6) if gz else body)
    headers = {"Content-Encoding": "gzip" if gz else "identity",
               "Content-Type": "application/vnd.apache.arrow.stream" if arrow else "text/plain"}
    per_round = len(warmup)

    def url_of(j: int) -> str:
        return urls[relay_of(j, per_round, len(urls))]

    with httpx.Client(timeout=60) as client:
        for j, body in enumerate(warmup):
            client.post(url_of(j), content=body, headers=headers)
    conn.send((len(bodies), lines_n, samples, sum(map(len, bodies))))
    conn.recv()
    # As a fleet's senders arrive: concurrently, keep-alive, at the 10,000-GPU fleet's rate of
    # requests (1,250 node agents every 5 s = 250 a second), each worker a sender's connection.
    rate = FLEET_GPUS / per_request / ROUND_S
    workers = min(CLIENT_CONNECTIONS, len(bodies))
    errors = [0] * workers
    # The stretches posted between the relays' flushes (without relays: all in one).
    ends = ([k * per_round + e for k in range(rounds) for e in flush_points(per_round, flush_s)]
            if relays is not None else [len(bodies)])
    starts = [0, *ends[:-1]]

    def flush() -> None:  # every sender has had its answer: the relays flush, then all go on
        if relays is not None:
            relays.send("flush")
            relays.recv()

    barrier = threading.Barrier(workers, action=flush)
    w0 = time.perf_counter()

    def worker(w: int) -> None:
        with httpx.Client(timeout=60) as client:
            for a, b in zip(starts, ends, strict=True):
                for j in range(a + w, b, workers):
                    delay = w0 + j / rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    r = client.post(url_of(j), content=bodies[j], headers=headers)
                    errors[w] += r.status_code != 204
                barrier.wait()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - w0
    conn.send((wall, sum(errors)))
    conn.close()


def _payload(text: str, arrow: bool) -> bytes:
    """One request's body: the lines, or the same round as our agent's Arrow IPC."""
    if not arrow:
        return text.encode()
    from collectors.arrow_batch import encode
    from collectors.schema import SchemaMapper

    return encode(SchemaMapper().parse(text, max_bytes=None))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _service(data_dir: Path, clock: Callable[[], float], srv: Server) -> Iterator[str]:
    import uvicorn

    from service.api.app import create_app
    from service.assembly import Wiring
    from service.pipeline import Pipeline, build_pipeline
    from service.settings import Settings

    settings = Settings(storage={"data_dir": data_dir},  # type: ignore[arg-type]
                        ingest={"coalesce_ms": srv.coalesce_ms})  # type: ignore[arg-type]

    def pipeline() -> Pipeline:
        if srv.sink:
            return build_pipeline(settings)
        return build_pipeline(settings, Wiring.offline(sinks=(), influxdb=False, notifiers=None))

    app: Any = (_floor_app if srv.floor else
                create_app(pipeline, clock=clock, schedule=False, lean_write=srv.lean))
    port = _free_port()
    if srv.profile is not None:
        srv.profile.start()  # every thread started from here on: uvicorn's, the workers

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, http=srv.http, loop=srv.loop))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + (120 if srv.profile is not None else 20)
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise RuntimeError("the service did not start in time")
    try:
        yield f"http://127.0.0.1:{port}/write"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        if srv.profile is not None:
            srv.profile.stop()


async def _floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The HTTP floor: every request's body read and answered 204, nothing parsed, no
    routing: what uvicorn and the event loop alone cost per request."""
    if scope["type"] == "lifespan":
        while True:
            if (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@dataclass(frozen=True)
class Server:
    """How the measured service runs: the lean route or FastAPI's, coalesced writes
    (service.api.coalesce) or each alone, uvicorn's HTTP parser and event loop, the SQLite
    sink."""

    name: str
    lean: bool = True
    coalesce_ms: float = 0.0
    http: str = "h11"
    loop: str = "asyncio"
    sink: bool = True
    arrow: bool = False  # agents post Arrow IPC (collectors.arrow_batch) instead of lines
    gzip: bool = True  # bodies gzip-compressed (as agents send them), or sent as they are
    floor: bool = False  # no service: every body read and answered 204 (_floor_app)
    relays: int = 0  # agents post to this many relays at full scale (bench.collectors_relay)
    flush_ms: float = 1000.0  # the relays' --flush-ms
    profile: ThreadProfile | None = field(default=None, compare=False)


class ThreadProfile:
    """cProfile of every thread started while it runs (uvicorn's event loop, the worker
    threads parsing and ingesting): the server's CPU split by function (`--profile`). Each
    thread profiles itself from its first event, timed by its own CPU clock that only runs
    while `on` (the measured rounds: not start-up, imports or the warm-up round); the stats
    are merged at the end."""

    def __init__(self) -> None:
        self.profiles: list[Any] = []
        self.on = False
        self._local = threading.local()

    def _clock(self) -> float:
        loc = self._local
        t = time.thread_time()
        dt = t - getattr(loc, "last", t)
        loc.last = t
        loc.v = getattr(loc, "v", 0.0) + (dt if self.on else 0.0)
        return float(loc.v)

    def start(self) -> None:
        import cProfile

        def boot(frame: Any, event: str, arg: Any) -> None:
            p = cProfile.Profile(self._clock)
            self.profiles.append(p)
            p.enable()  # replaces this bootstrap as the thread's profile function

        threading.setprofile(boot)

    def stop(self) -> None:
        threading.setprofile(None)

    def dump(self, path: str) -> None:
        import pstats

        pstats.Stats(*self.profiles).dump_stats(path)


FASTAPI = Server("FastAPI route")
LEAN = Server("lean route")
COALESCED = Server("lean, coalesced 50 ms", coalesce_ms=50.0)
HTTPTOOLS = Server("lean, coalesced, httptools+uvloop", coalesce_ms=50.0, http="httptools",
                   loop="uvloop")


def _fast_http() -> bool:
    try:
        import httptools  # noqa: F401
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def bench_ingest(sim_gpus: int, per_request: int, rounds: int, nvlink: bool, srv: Server
                 ) -> IngestRun:
    from bench.collectors_relay import Relays, relays_for

    t0 = 1.75e9
    data_clock = [t0]
    ctx = mp.get_context("spawn")
    relays: Relays | None = None
    relay_cpu = 0.0
    relay_count = 0
    with tempfile.TemporaryDirectory() as tmp, _service(Path(tmp), lambda: data_clock[0],
                                                       srv) as url:
        ours, theirs = ctx.Pipe()
        data_clock[0] = t0 + ROUND_S * (rounds + 1)
        target: str | list[str] = url
        if srv.relays:
            # The relays flush when the client says a flush interval's share of a simulated
            # round is through (bench.collectors_relay), not by a compressed clock of their own.
            relays = Relays(url, relays_for(sim_gpus // NODE_GPUS, srv.relays))
            target = relays.urls
        proc = ctx.Process(target=_client, args=(
            theirs, target, sim_gpus, per_request, rounds, nvlink, t0, srv.arrow, srv.gzip,
            relays.rounds if relays is not None else None, srv.flush_ms / 1e3))
        proc.start()
        theirs.close()
        requests, lines, samples, nbytes = ours.recv()
        if relays is not None:
            _, warm_bodies, _ = relays.drain()  # the warm-up round is through to the service
        if srv.profile is not None:
            srv.profile.on = True
        c0 = time.process_time()
        ours.send("go")
        wall, errors = ours.recv()
        if relays is not None:  # what the relays hold is through to the service
            relay_cpu, bodies, failures = relays.drain()
            requests, errors = bodies - warm_bodies, errors + failures
            relay_count = relays.n
            relays.close()
        cpu = time.process_time() - c0
        if srv.profile is not None:
            srv.profile.on = False
        proc.join()
    fleet_lines = FLEET_GPUS * (2 + (LINKS_PER_GPU if nvlink else 0))
    scale = FLEET_GPUS / (sim_gpus * rounds)
    return IngestRun(
        variant=_variant(nvlink, srv),
        sim_gpus=sim_gpus, gpus_per_request=per_request, requests=requests, lines=lines,
        samples=samples, gzip_bytes=nbytes, server_cpu_s=cpu, client_wall_s=wall,
        lines_per_s_cpu=lines / cpu, samples_per_s_cpu=samples / cpu,
        lines_per_s_wall=lines / wall, fleet_lines_per_round=fleet_lines,
        projected_cpu_s=cpu * scale, projected_wall_s=wall * scale, errors=errors,
        relays=srv.relays, relay_cpu_s=relay_cpu * scale, sim_relays=relay_count,
        rounds=rounds)


def _variant(nvlink: bool, srv: Server) -> str:
    return (("per-link NVLink" if nvlink else "NVLink aggregated") + ", " + srv.name
            + ("" if srv.sink else ", no SQLite sink"))


def bench_phases(sim_gpus: int, per_request: int, rounds: int, nvlink: bool) -> IngestPhases:
    """The /write work without HTTP, phase by phase, in this process (median of the rounds
    after a first one that teaches the mapper the fleet's layouts)."""
    from collectors.lineprotocol import parse
    from collectors.schema import SchemaMapper
    from service.api.inflate import inflate
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.settings import Settings

    t0 = 1.75e9
    bodies = []
    for k in range(rounds + 1):
        lines, _ = _fleet_lines(sim_gpus, nvlink=nvlink, t0=t0 + ROUND_S * k)
        bodies.append([gzip.compress(body.encode(), 6) for body in _requests(lines, per_request)])
    round_lines = len(lines)
    now = t0 + ROUND_S * (rounds + 1)
    fast, ref = SchemaMapper(), SchemaMapper()
    times: dict[str, list[float]] = {k: [] for k in ("inflate", "fast", "ref", "ingest", "sink")}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(storage={"data_dir": Path(tmp)})  # type: ignore[arg-type]
        with_sink, bare = build_pipeline(settings), build_pipeline(settings,
                                                                   Wiring.offline(sinks=(),
                                                                                  influxdb=False,
                                                                                  notifiers=None))
        for k, requests in enumerate(bodies):
            spent = dict.fromkeys(times, 0.0)
            taken = 0
            for body in requests:
                c0 = time.process_time()
                data = inflate(body, limit=1 << 30).data
                c1 = time.process_time()
                fast_lines = fast.fast_lines
                batch = fast.parse(data, max_bytes=None)
                taken += fast.fast_lines - fast_lines
                c2 = time.process_time()
                points, rejected = parse(data, max_bytes=None)
                ref.to_batch(points, rejected)
                c3 = time.process_time()
                bare.ingest(batch, now)
                c4 = time.process_time()
                with_sink.ingest(batch, now)
                c5 = time.process_time()
                for key, dt in zip(times, (c1 - c0, c2 - c1, c3 - c2, c4 - c3,
                                           (c5 - c4) - (c4 - c3)), strict=True):
                    spent[key] += dt
            if k:
                for key in times:
                    times[key].append(spent[key])
        with_sink.close()
        bare.close()
    scale = FLEET_GPUS / sim_gpus
    med = {key: statistics.median(v) * scale for key, v in times.items()}
    fleet_lines = FLEET_GPUS * (2 + (LINKS_PER_GPU if nvlink else 0))
    return IngestPhases(
        variant="per-link NVLink lines" if nvlink else "NVLink aggregated (no link lines)",
        sim_gpus=sim_gpus, gpus_per_request=per_request, fleet_lines_per_round=fleet_lines,
        inflate_s=med["inflate"], parse_map_s=med["fast"], parse_map_reference_s=med["ref"],
        fast_share=taken / round_lines,  # of the last round
        ingest_s=med["ingest"], sink_s=max(med["sink"], 0.0),
        total_s=med["inflate"] + med["fast"] + med["ingest"] + max(med["sink"], 0.0))


def _requests(lines: list[str], per_request: int) -> list[str]:
    """Line protocol bodies of `per_request` GPUs each (whole nodes), in node order."""
    groups: dict[int, list[str]] = {}
    for ln in lines:
        node = int(_node_of(ln)[1:])
        groups.setdefault(node * NODE_GPUS // per_request, []).append(ln)
    return ["\n".join(groups[g]) + "\n" for g in sorted(groups)]


# ---- main -------------------------------------------------------------------------------------

def run(runs: int, sim_gpus: int, rounds: int, per_request: list[int],
        only_ingest: bool = False, only: list[str] | None = None,
        relays: int = 40) -> Report:
    rep = Report()
    if only_ingest:
        pass
    elif not fx.available():
        rep.skipped.append(f"fixtures not found at {fx.FIXTURES}: scrape and parser figures "
                           "skipped")
    else:
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            rep.scrapes += bench_nvidia_smi(tmp, runs)
            rep.scrapes.append(bench_dcgm(runs))
            rep.scrapes.append(bench_infiniband(runs))
            rep.scrapes.append(bench_kernel_log(tmp, runs))
        rep.parsers = bench_parsers()
    # Each configuration's servers in one run, the FastAPI route first (the baseline): for
    # node agents with per-link NVLink every step of issue 18 (lean route, coalescing, uvicorn's
    # C HTTP parser), and the last without the SQLite sink (its cost is the sink's own).
    best = HTTPTOOLS if _fast_http() else COALESCED
    for nvlink in (True, False):
        for n in per_request:
            agents = nvlink and n == NODE_GPUS
            servers = [FASTAPI, LEAN, COALESCED, best] if agents else [FASTAPI, best]
            if agents:
                servers.insert(1, replace(best, name="HTTP floor (body read, 204, no parse)",
                                          floor=True))
                servers.append(replace(best, sink=False))
                # our agent's Arrow payload; then a longer coalescing window
                arrow = replace(best, name=best.name + ", Arrow", arrow=True)
                servers += [arrow, replace(arrow, sink=False)]
                # the same uncompressed (on loopback: inflating against reading more bytes)
                servers.append(replace(arrow, name=arrow.name + " uncompressed", sink=False,
                                       gzip=False))
                servers.append(replace(arrow, name=arrow.name + " 150 ms", coalesce_ms=150.0,
                                       sink=False))
                # the same agents through relays, one per rack (collectors.agent.relay)
                for ms in (1000.0, 5000.0):
                    servers.append(replace(arrow, name=f"{arrow.name}, via {relays} relays "
                                                       f"flush {ms:g} ms",
                                           relays=relays, flush_ms=ms))
            if only:  # the FastAPI route stays: every figure is a ratio to it
                servers = [FASTAPI] + [s for s in servers[1:]
                                       if any(o in _variant(nvlink, s) for o in only)]
            base = None
            for srv in dict.fromkeys(servers):
                run_ = bench_ingest(sim_gpus, n, rounds, nvlink, srv)
                base = base or run_
                run_.fastapi_cpu_s = base.projected_cpu_s
                rep.ingest.append(run_)
    if only_ingest:
        _goals(rep)
        return rep
    for nvlink in (True, False):
        for n in per_request:
            rep.phases.append(bench_phases(sim_gpus, n, rounds, nvlink))
    _goals(rep)
    return rep


def profile(path: str, sim_gpus: int, rounds: int, arrow: bool = False,
            sink: bool = False, relays: int = 0, flush_ms: float = 1000.0) -> None:
    """The best node-agent variant (line protocol or our agent's Arrow; by default without the
    SQLite sink, whose cost is its own) under cProfile in every server thread; the top
    functions by own time are printed."""
    import pstats

    prof = ThreadProfile()
    best = HTTPTOOLS if _fast_http() else COALESCED
    if arrow:
        best = replace(best, name=best.name + ", Arrow", arrow=True)
    if relays:  # the service's side of the agents posting through relays
        best = replace(best, name=f"{best.name}, via {relays} relays flush {flush_ms:g} ms",
                       relays=relays, flush_ms=flush_ms)
    r = bench_ingest(sim_gpus, NODE_GPUS, rounds, True, replace(best, sink=sink, profile=prof))
    prof.dump(path)
    print(f"{r.variant}: {r.projected_cpu_s:.2f} s per 10k round under the profiler "
          f"({r.requests} requests); stats in {path}")
    pstats.Stats(path).sort_stats("tottime").print_stats(40)


def _goals(rep: Report) -> None:
    if rep.scrapes:
        narrow = [s for s in rep.scrapes if s.what.startswith("narrow")]
        others = [s for s in rep.scrapes if s.collector != "nvidia-smi"]
        if narrow:
            total = narrow[0].cpu_s + sum(s.cpu_s for s in others)
            smi = narrow[0].cpu_s
            met = "MET" if smi < SCRAPE_GOAL_CPU_S else "NOT MET"
            rep.goals.append(
                f"8-GPU node scrape < {SCRAPE_GOAL_CPU_S * 1e3:.0f} ms CPU (narrow query): "
                f"nvidia-smi alone {smi * 1e3:.1f} ms -> {met}; "
                f"all four sources {total * 1e3:.1f} ms -> "
                f"{'MET' if total < SCRAPE_GOAL_CPU_S else 'NOT MET'}")
    for new in rep.ingest:
        if new.projected_cpu_s == new.fastapi_cpu_s:
            continue  # the baseline itself
        ok = new.projected_cpu_s <= INGEST_GOAL_CPU_S
        rep.goals.append(
            f"10,000-GPU 5-s round <= {INGEST_GOAL_CPU_S:g} s CPU ({new.variant}, "
            f"{new.gpus_per_request} GPUs/request): projected {new.projected_cpu_s:.2f} s "
            f"(FastAPI route {new.fastapi_cpu_s:.2f} s, x{_ratio(new):.2f}) -> "
            f"{'MET' if ok else 'NOT MET'}"
            + (f"; the {new.relays} relays' own CPU {new.relay_cpu_s:.2f} s (rack hosts), "
               f"{new.bodies_per_relay_round:.2f} bodies per relay per round"
               if new.relays else ""))
    for ph in rep.phases:
        ok = ph.total_s - ph.sink_s < INGEST_GOAL_CPU_S
        rep.goals.append(
            f"  without HTTP and the SQLite sink ({ph.variant}, {ph.gpus_per_request} "
            f"GPUs/request): {ph.total_s - ph.sink_s:.2f} s -> {'MET' if ok else 'NOT MET'}; "
            f"the sink adds {ph.sink_s:.2f} s")


def _ratio(new: IngestRun) -> float:
    return new.fastapi_cpu_s / new.projected_cpu_s if new.projected_cpu_s else float("inf")


def _print(rep: Report) -> None:
    for why in rep.skipped:
        print(f"skipped: {why}")
    if rep.scrapes:
        print(f"1. One scrape of an {NODE_GPUS}-GPU node (median; CPU = this process + children)")
        print(f"  {'collector':<14} {'what':<58} {'samples':>7} {'CPU':>9} {'child':>9} "
              f"{'wall':>9}  up")
        for s in rep.scrapes:
            print(f"  {s.collector:<14} {s.what[:58]:<58} {s.samples:>7} "
                  f"{s.cpu_s * 1e3:>7.2f}ms {s.child_cpu_s * 1e3:>7.2f}ms "
                  f"{s.wall_s * 1e3:>7.2f}ms  {'yes' if s.up else 'NO: ' + s.note}")
        print()
    if rep.parsers:
        print("2. Parser throughput on the real captures (CPU)")
        print(f"  {'parser':<19} {'input':<50} {'lines':>6} {'samples':>7} {'per parse':>10} "
              f"{'lines/s':>10} {'samples/s':>10}")
        for p in rep.parsers:
            print(f"  {p.parser:<19} {p.input[:50]:<50} {p.lines:>6} {p.samples:>7} "
                  f"{p.seconds_per_parse * 1e3:>8.2f}ms {p.lines_per_s:>10.0f} "
                  f"{p.samples_per_s:>10.0f}")
        print()
    print("3. /write on loopback (gzip line protocol; server CPU = this process's CPU while a "
          "client process posts)")
    print(f"  {'variant':<64} {'GPUs':>5} {'GPU/req':>7} {'reqs':>5} {'lines':>7} "
          f"{'samples':>8} {'srv CPU':>8} {'wall':>7} {'lines/s':>9} {'samples/s':>10} "
          f"{'10k CPU':>8} {'10k wall':>8}")
    for r in rep.ingest:
        print(f"  {r.variant:<64} {r.sim_gpus:>5} {r.gpus_per_request:>7} {r.requests:>5} "
              f"{r.lines:>7} {r.samples:>8} {r.server_cpu_s:>7.2f}s {r.client_wall_s:>6.2f}s "
              f"{r.lines_per_s_cpu:>9.0f} {r.samples_per_s_cpu:>10.0f} "
              f"{r.projected_cpu_s:>7.2f}s {r.projected_wall_s:>7.2f}s"
              + (f"  ({r.errors} non-204)" if r.errors else ""))
    print(f"  (10k = one {ROUND_S:g}-s round of {FLEET_GPUS} GPUs: {LINKS_PER_GPU} NVLink lines "
          "and 1 IB port per GPU, scaled linearly from the measured rounds)")
    print("  FastAPI route -> each step, 10k CPU (same run):")
    for new in rep.ingest:
        print(f"    {new.variant:<64} {new.gpus_per_request:>4} GPU/req"
              f"  {new.fastapi_cpu_s:6.2f}s -> {new.projected_cpu_s:6.2f}s  "
              f"(x{_ratio(new):.2f})"
              + (f"  + relays {new.relay_cpu_s:.2f}s on rack hosts; the service took "
                 f"{new.bodies_per_relay_round:.2f} bodies per relay per round "
                 f"({new.requests} from {new.sim_relays} relays over {new.rounds} rounds; "
                 f"{new.bodies_per_relay_round * new.relays:.0f} per 10k round)"
                 if new.relays else ""))
    if rep.phases:
        print("  In-process phases, CPU s per 10k round (median round; parse = steady state, "
              "reference = point-by-point path)")
        print(f"  {'variant':<34} {'GPU/req':>7} {'inflate':>8} {'parse':>8} {'lines/s':>9} "
              f"{'reference':>9} {'fast %':>6} {'ingest':>8} {'sink':>8} {'total':>8}")
        for ph in rep.phases:
            print(f"  {ph.variant:<34} {ph.gpus_per_request:>7} {ph.inflate_s:>7.2f}s "
                  f"{ph.parse_map_s:>7.2f}s {ph.parse_lines_per_s:>9.0f} "
                  f"{ph.parse_map_reference_s:>8.2f}s {ph.fast_share * 100:>5.0f}% "
                  f"{ph.ingest_s:>7.2f}s {ph.sink_s:>7.2f}s {ph.total_s:>7.2f}s")
    print()
    print("Goals")
    for g in rep.goals:
        print(f"  {g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="scrapes per collector (median)")
    ap.add_argument("--sim-gpus", type=int, default=512, help="simulated fleet for /write")
    ap.add_argument("--rounds", type=int, default=3, help="5-s rounds posted per variant")
    ap.add_argument("--gpus-per-request", type=int, nargs="+", default=[8, 512],
                    help="GPUs per POST: 8 = one node agent, more = a relay batching nodes")
    ap.add_argument("--only-ingest", action="store_true",
                    help="section 3's loopback runs only (no scrapes, parsers or phases)")
    ap.add_argument("--profile", metavar="PATH",
                    help="instead: profile the best node-agent variant's server (every thread) "
                         "and write cProfile stats to PATH (read with python -m pstats)")
    ap.add_argument("--profile-arrow", action="store_true",
                    help="with --profile: the agents post Arrow IPC instead of line protocol")
    ap.add_argument("--profile-sink", action="store_true",
                    help="with --profile: keep the SQLite sink")
    ap.add_argument("--profile-relays", action="store_true",
                    help="with --profile: the agents post through --relays relays (the "
                         "service's side is profiled; the relays run in their own process)")
    ap.add_argument("--servers", nargs="+", metavar="TEXT",
                    help="only the loopback variants whose name contains one of these (the "
                         "FastAPI route always runs first, as the baseline)")
    ap.add_argument("--relays", type=int, default=40,
                    help="relays the node agents post to in the relay variants, at the "
                         "10,000-GPU scale (40: one per rack of ~31 nodes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    # The fixtures are real and show real faults (saturated IB counters, unmapped Xid bus ids):
    # the collectors' warnings about them are not what is measured here.
    logging.getLogger("collectors").setLevel(logging.ERROR)
    if args.profile:
        profile(args.profile, args.sim_gpus, args.rounds, args.profile_arrow,
                args.profile_sink, args.relays if args.profile_relays else 0)
        return 0
    rep = run(args.runs, args.sim_gpus, args.rounds, args.gpus_per_request, args.only_ingest,
              args.servers, args.relays)
    if args.json:
        json.dump(asdict(rep), sys.stdout, indent=2)
        print()
    else:
        _print(rep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
