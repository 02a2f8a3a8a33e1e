"""Alerting benchmark: alert evaluation per tick, fault-to-migration latency and notification
throughput with real loopback receivers.

    python -m bench.alerting [--json] [--gpus 10000] [--links 18] [--ticks 200]

Three figures, each measured side by side with what it is made of (no asserts on time):

1. Alert evaluation per tick (goal: under 50 ms at 10,000 GPUs). `AlertMachine.step` over the
   GPU, NVLink and IB-port scopes of a DGX-like fleet (8 GPUs and 8 IB ports per node,
   `--links` NVLink links per GPU, 18 as in bench/pipeline.py): risk mostly low, 3 % of each
   scope above an enter threshold (spread over the three levels), a handful per scope moving
   between low and a level each tick (some GPUs as hard faults), 0.1 % stale, with last_seen
   and confidence arrays. The machine is first brought to its steady state (long window, for-
   durations) with minute-spaced ticks, then timed over `--ticks` 5-s ticks: median and p95 of
   the three steps together, and per scope. Next to it, `Dispatcher.flush` with ~100 alerts
   firing in ~20 groups: when nothing is due (the common tick), when the dispatcher is marked
   dirty but nothing is due (what Pipeline.tick does whenever any alert or flag changed), and
   when every group is due.
2. Level-3 condition to migration hook call (goal: one tick plus the hook's own time). A
   Pipeline over a small fleet (`--rem-gpus`) with a RemediationController in mode "auto" whose
   hook is the real command hook, running a tiny /bin/sh script that records a timestamp, wrapped
   so the call itself is timed. In round k one GPU reports ecc_dbe_volatile=1; measured: from the
   start of the tick that sees it to hook.execute being called, to the script running, the
   tick's own duration and the hook's own run time. The controller is wired through
   service.remediation.wiring when that module exists; without it the bench says so and drives
   tick -> controller.request -> hook.execute itself.
3. Notifications per second through Dispatcher.flush and the background Sender, per receiver
   type, against real loopback servers: a ThreadingHTTPServer answering 200 behind the webhook
   receiver and an aiosmtpd SMTP server (no TLS) behind the email receiver. `--alerts` alerts on
   `--nodes` nodes, grouped by node with group_wait 0, so one message per node; timed from the
   flush until every message is delivered.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.fleet_tables import fleet_tables
from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from service.notify.build import build_notification
from service.notify.config import NotifySettings, ReceiverSettings, RouteSettings
from service.notify.dispatcher import Dispatcher
from service.notify.notification_log import NotificationLog
from service.notify.silences import SilenceStore
from service.remediation.config import RemediationSettings
from service.remediation.hooks.base import ActionRequest, HookResult, NodeState, Step
from service.remediation.hooks.command import CommandConfig, CommandHook
from service.stages.alert_machine import AlertMachine, AlertPolicy, Transition
from service.stages.alert_store import AlertStore

EVAL_GOAL_MS = 50.0
STEP_S = 5.0
T0 = 1_699_999_200.0  # on a whole hour
SCOPES = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)
LOOPBACK = "127.0.0.1"
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


def _ms(xs: list[float]) -> tuple[float, float]:
    """Median and p95 of seconds, in ms."""
    a = np.asarray(xs) * 1e3
    return float(np.median(a)), float(np.percentile(a, 95))


# ---- 1. alert evaluation -----------------------------------------------------------------------

# Risk bands well inside each level's enter/exit thresholds (0.3/0.2, 0.6/0.45, 0.9/0.75), so
# the per-tick noise does not make an instance flap on its own.
BANDS = ((0.33, 0.55), (0.63, 0.85), (0.92, 1.0))


class RiskScope:
    """Per-tick inputs of one scope: base risk (mostly low, `hot` above a threshold), a handful
    moving between low and a level each tick, a fixed stale set."""

    def __init__(self, scope: Scope, n: int, rng: np.random.Generator,
                 hot_frac: float = 0.03, stale_frac: float = 0.001) -> None:
        self.scope, self.n, self.rng = scope, n, rng
        self.base: F64 = rng.beta(1.0, 30.0, n)  # mean ~0.03, rarely above 0.2
        self.hot: B = rng.random(n) < hot_frac
        self.hard: B = np.zeros(n, bool)
        k = int(self.hot.sum())
        self.base[self.hot] = self._band_values(k)
        self.stale: B = rng.random(n) < stale_frac
        self.conf: F32 = rng.beta(1.0, 20.0, n).astype(np.float32)
        self.conf[self.hot] = rng.uniform(0.5, 1.0, k).astype(np.float32)

    def _band_values(self, k: int) -> F64:
        band = self.rng.integers(0, 3, k)
        lo = np.array([b[0] for b in BANDS])[band]
        hi = np.array([b[1] for b in BANDS])[band]
        return np.asarray(self.rng.uniform(lo, hi), np.float64)

    def churn(self, k: int) -> None:
        """k hot entities go back to low and k low ones rise to a level (hard on GPUs, 1 in 5):
        the fraction above thresholds stays where it is."""
        cool = self.rng.choice(np.flatnonzero(self.hot), min(k, int(self.hot.sum())),
                               replace=False)
        warm = self.rng.choice(np.flatnonzero(~self.hot & ~self.stale), k, replace=False)
        self.base[cool] = self.rng.beta(1.0, 30.0, len(cool))
        self.hot[cool], self.hard[cool] = False, False
        self.base[warm] = self._band_values(len(warm))
        self.hot[warm] = True
        if self.scope is Scope.GPU:
            hard = warm[self.rng.random(len(warm)) < 0.2]
            self.base[hard], self.hard[hard] = 1.0, True

    def inputs(self, now: float) -> tuple[F32, B, F64]:
        noise = self.rng.normal(0.0, 0.01, self.n)
        risk = np.clip(self.base + noise, 0.0, 1.0).astype(np.float32)
        risk[self.hard] = 1.0
        last_seen = now - self.rng.uniform(0.0, STEP_S, self.n)
        last_seen[self.stale] = now - 600.0
        return risk, self.hard, last_seen


@dataclass
class EvalResult:
    gpus: int
    links: int
    ports: int
    entities: int
    ticks: int
    step_median_ms: float
    step_p95_ms: float
    per_scope_median_ms: dict[str, float]
    transitions_per_tick: float
    max_transitions_in_a_tick: int
    firing_at_end: int
    goal_ms: float = EVAL_GOAL_MS
    flush: dict[str, Any] = field(default_factory=dict)


def bench_eval(gpus: int, links: int, ports: int, ticks: int, churn: int,
               seed: int = 0) -> EvalResult:
    tables = fleet_tables(gpus, links, ports)
    rng = np.random.default_rng(seed)
    scopes = {s: RiskScope(s, len(tables[s]), rng) for s in SCOPES}
    ents: dict[Scope, list[Entity]] = {s: list(tables[s].entities) for s in SCOPES}
    machine = AlertMachine(AlertPolicy())

    def tick(now: float) -> tuple[dict[Scope, float], int]:
        spent: dict[Scope, float] = {}
        moved = 0
        for s, rs in scopes.items():
            rs.churn(churn)
            risk, hard, seen = rs.inputs(now)
            a = time.perf_counter()
            out = machine.step(s, risk, hard, now, ents[s], last_seen=seen, confidence=rs.conf)
            spent[s] = time.perf_counter() - a
            moved += len(out)
        return spent, moved

    # Steady state first: minute-spaced ticks fill the long window and run out every
    # for-duration and dwell, so the timed ticks are not the start-up storm.
    now = T0
    for _ in range(40):
        now += 60.0
        tick(now)
    gc.collect()
    total: list[float] = []
    per: dict[Scope, list[float]] = {s: [] for s in SCOPES}
    moves: list[int] = []
    for _ in range(ticks):
        now += STEP_S
        spent, moved = tick(now)
        total.append(sum(spent.values()))
        for s, t in spent.items():
            per[s].append(t)
        moves.append(moved)
    med, p95 = _ms(total)
    firing = sum(int(np.count_nonzero(machine.level(s))) for s in SCOPES)
    return EvalResult(
        gpus=gpus, links=len(tables[Scope.NVLINK]), ports=len(tables[Scope.IB_PORT]),
        entities=sum(len(t) for t in tables.values()), ticks=ticks, step_median_ms=med,
        step_p95_ms=p95,
        per_scope_median_ms={str(s): _ms(per[s])[0] for s in SCOPES},
        transitions_per_tick=statistics.fmean(moves), max_transitions_in_a_tick=max(moves),
        firing_at_end=firing)


def _fire(alerts: AlertStore, nodes: int, per_node: int, at: float,
          rng: np.random.Generator) -> int:
    """Open `per_node` GPU alerts (levels 1-3) on each of `nodes` nodes."""
    ts: list[Transition] = []
    for i in range(nodes):
        node = f"n{i:05d}"
        for g in range(per_node):
            e = Entity.gpu(node, g % 8) if per_node <= 8 else Entity.nvlink(node, g % 8, g // 8)
            lv = int(rng.integers(1, 4))
            ts.append(Transition(e.scope, i * per_node + g, e.key, node, 0, lv, at,
                                 float(rng.uniform(*BANDS[lv - 1])), corroborated=lv == 3))
    alerts.apply(ts, {})
    return len(ts)


def bench_flush(tmp: Path, nodes: int = 20, per_node: int = 5,
                repeats: int = 200) -> dict[str, Any]:
    """Dispatcher.flush with ~100 alerts firing in ~20 groups (one per node)."""
    db = str(tmp / "flush.db")
    alerts = AlertStore(db)
    n = _fire(alerts, nodes, per_node, T0, np.random.default_rng(1))
    settings = NotifySettings(route=RouteSettings(
        receiver="record", group_by=["node"], group_wait_s=0.0, group_interval_s=300.0,
        repeat_interval_s=4 * 3600.0))
    d = Dispatcher(settings, alerts, NotificationLog(db), SilenceStore(db))
    interval = 300.0
    # Every group due: each flush a group interval later. Reporting failure leaves the log
    # empty, so every group has a "new" message again next time.
    due: list[float] = []
    msgs = 0
    now = T0
    for _ in range(repeats // 4):
        now += interval
        a = time.perf_counter()
        outs = d.flush(now)
        due.append(time.perf_counter() - a)
        msgs = len(outs)
        for o in outs:
            d.done(o, False)
    # Nothing due: ticks within the group interval, nothing changed.
    idle: list[float] = []
    dirty: list[float] = []
    stray = 0  # messages where none should be due (none expected)
    t = now
    for _ in range(repeats):
        t += 0.1
        a = time.perf_counter()
        got = d.flush(t)
        idle.append(time.perf_counter() - a)
        stray += len(got)
    # Nothing due but marked: Pipeline.tick marks the dispatcher whenever an alert changed
    # level or a flag moved, so with a handful of changes per tick this is every tick.
    for _ in range(repeats):
        t += 0.1
        d.mark()
        a = time.perf_counter()
        got = d.flush(t)
        dirty.append(time.perf_counter() - a)
        stray += len(got)
    alerts.close()
    return {"alerts": n, "groups": len(d.groups), "messages_when_due": msgs,
            "messages_when_not_due": stray,
            "idle_median_ms": _ms(idle)[0], "idle_p95_ms": _ms(idle)[1],
            "dirty_median_ms": _ms(dirty)[0], "dirty_p95_ms": _ms(dirty)[1],
            "due_median_ms": _ms(due)[0], "due_p95_ms": _ms(due)[1]}


# ---- 2. level 3 to the migration hook ----------------------------------------------------------

class TimedHook:
    """The real hook, with the moment `execute` is called and returns recorded."""

    def __init__(self, inner: CommandHook) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[str, float, float, HookResult]] = []  # node, called, returned
        self.called = threading.Event()

    def plan(self, req: ActionRequest) -> list[Step]:
        return self.inner.plan(req)

    def execute(self, req: ActionRequest) -> HookResult:
        a = time.perf_counter()
        res = self.inner.execute(req)
        self.calls.append((req.node, a, time.perf_counter(), res))
        self.called.set()
        return res

    def release(self, node: str) -> HookResult:
        return self.inner.release(node)

    def inspect(self, node: str) -> NodeState:
        return self.inner.inspect(node)


class _AlwaysAtRisk:
    """The direct path's recheck: the condition still holds (the tick just raised it)."""

    def recheck(self, node: str, fingerprint: str, now: float) -> str | None:
        return None


@dataclass
class Trial:
    gpu: str
    level3_in_tick: bool
    hook_called: bool
    tick_s: float
    tick_to_call_s: float | None = None
    tick_to_script_s: float | None = None
    hook_run_s: float | None = None
    hook_ok: bool | None = None
    detail: str = ""


@dataclass
class RemediationResult:
    gpus: int
    path: str  # "pipeline" (wired through service.remediation.wiring) or "direct"
    trials: list[Trial]
    tick_median_ms: float
    tick_to_call_median_ms: float | None
    tick_to_script_median_ms: float | None
    hook_run_median_ms: float | None
    call_after_tick_end: int  # trials where the hook was called only after tick() returned
    note: str = ""


def bench_remediation(tmp: Path, gpus: int, trials: int, warmup_rounds: int) -> RemediationResult:
    from bench.pipeline import Fleet  # healthy rounds of every catalog metric
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.remediation.actions import ActionStore
    from service.remediation.controller import MigrationRequest, RemediationController
    from service.settings import Settings

    fleet = Fleet(gpus)
    n_nodes = len({e.node for e in fleet.tables[Scope.GPU].entities})
    stamps = tmp / "hook-stamps.txt"
    script = 'printf "%s %s\\n" "$(date +%s.%N)" "$1" >> "$0"'
    hook = TimedHook(CommandHook(CommandConfig(
        drain=["/bin/sh", "-c", script, str(stamps), "{node}"],
        release=["/bin/true"], timeout_s=30.0)))
    rs = RemediationSettings(mode="auto", hook="command", breaker_max_fraction=1.0,
                             breaker_max_nodes=1000, max_concurrent=4, max_attempts_per_node=10)
    db = str(tmp / "rem.db")
    from service.notify.record import RecordReceiver

    pipe = build_pipeline(Settings(), Wiring.offline(alert_db=db, notifiers=[RecordReceiver(db)],
                                                     sinks=(), influxdb=False))
    controller: RemediationController
    try:
        from service.remediation.wiring import build_remediation
    except ImportError:
        path = "direct"
        controller = RemediationController(ActionStore(db), hook, rs, _AlwaysAtRisk(),
                                           lambda: n_nodes)
        note = ("service.remediation.wiring is missing: measured tick, then "
                "controller.request -> hook.execute driven by the bench")
    else:
        path = "pipeline"
        rem = build_remediation(rs, pipe.alerts, db, lambda: n_nodes, hook=hook, now=T0)
        assert rem is not None
        pipe.remediation = rem
        controller = rem.controller
        note = "Pipeline(remediation=service.remediation.wiring.Remediator), real command hook"
    col = CATALOG.column(Scope.GPU, "ecc_dbe_volatile")
    k = 0

    def round_(extra: Callable[[], None] | None = None) -> tuple[float, float, float, Any]:
        nonlocal k
        ts = T0 + STEP_S * k
        k += 1
        if extra is not None:
            extra()
        batch = fleet.round(ts)
        pipe.ingest(batch, ts)
        wall = time.time()
        a = time.perf_counter()
        res = pipe.tick(ts)
        b = time.perf_counter()
        return a, b, wall, res

    for _ in range(warmup_rounds):
        round_()
    out: list[Trial] = []
    gpu_entities = fleet.tables[Scope.GPU].entities
    step = max(1, n_nodes // max(trials, 1))
    for i in range(trials):
        slot = (i * step % n_nodes) * 8 + 3
        gpu = gpu_entities[slot].key
        hook.called.clear()
        before = len(hook.calls)

        def hit(slot: int = slot) -> None:
            fleet.counters[Scope.GPU][slot, col] += 1

        start, end, wall, res = round_(hit)
        level3 = [(t, al) for t, al in res.changed if t.entity == gpu and t.new == 3]
        if path == "direct" and level3:
            t3, al = level3[0]
            from service.notify.refs import summary_of

            controller.request(MigrationRequest(al.node, al.id, al.fingerprint, al.level,
                                                al.risk, summary_of(al), t3.at), t3.at)
            end = time.perf_counter()
        called = hook.called.wait(10.0)
        tr = Trial(gpu=gpu, level3_in_tick=bool(level3), hook_called=called,
                   tick_s=end - start)
        if called and len(hook.calls) > before:
            node, c0, c1, hres = hook.calls[-1]
            tr.tick_to_call_s, tr.hook_run_s, tr.hook_ok = c0 - start, c1 - c0, hres.ok
            tr.detail = hres.detail
            lines = stamps.read_text().split("\n") if stamps.exists() else []
            got = [float(s.split()[0]) for s in lines if s.endswith(" " + node)]
            if got:
                tr.tick_to_script_s = got[-1] - wall
        else:
            audit = controller.store.audit(node=gpu.split(":")[0])
            tr.detail = "; ".join(f"{e.event}: {e.result}" for e in audit[-3:]) or "no action"
        out.append(tr)
        controller.wait(10.0)
        for _ in range(2):  # a couple of ordinary rounds between faults
            round_()
    pipe.close()
    if path == "direct":
        controller.close()

    def med(xs: list[float | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return statistics.median(vals) * 1e3 if vals else None

    return RemediationResult(
        gpus=gpus, path=path, trials=out,
        tick_median_ms=statistics.median(t.tick_s for t in out) * 1e3,
        tick_to_call_median_ms=med([t.tick_to_call_s for t in out]),
        tick_to_script_median_ms=med([t.tick_to_script_s for t in out]),
        hook_run_median_ms=med([t.hook_run_s for t in out]),
        call_after_tick_end=sum(1 for t in out if t.tick_to_call_s is not None
                                and t.tick_to_call_s > t.tick_s),
        note=note)


# ---- 3. notifications per second ---------------------------------------------------------------

class _HttpSink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real webhook endpoint
    disable_nagle_algorithm = True
    server: _HttpServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.hit()
        body = b'{"ok":true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default listen backlog of 5 drops connects under a burst

    def __init__(self) -> None:
        super().__init__((LOOPBACK, 0), _HttpSink)
        self._lock = threading.Lock()
        self.requests = 0

    def hit(self) -> None:
        with self._lock:
            self.requests += 1


@contextmanager
def http_server() -> Iterator[_HttpServer]:
    srv = _HttpServer()
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                          daemon=True)
    th.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5.0)


class _SmtpSink:
    def __init__(self) -> None:
        self.accepted = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.accepted += 1  # on the server's own loop thread
        return "250 2.0.0 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@contextmanager
def smtp_server(sink: _SmtpSink) -> Iterator[int]:
    from aiosmtpd.controller import Controller

    for attempt in range(3):  # aiosmtpd needs a concrete port; another process may take it
        ctl = Controller(sink, hostname=LOOPBACK, port=_free_port(), ready_timeout=5.0)
        try:
            ctl.start()
            break
        except OSError:
            if attempt == 2:
                raise
    try:
        yield int(ctl.port)
    finally:
        ctl.stop()


@dataclass
class ThroughputResult:
    receiver_type: str
    alerts: int
    nodes: int
    messages: int
    delivered: int
    failed: int
    received_by_server: int
    flush_s: float
    send_s: float
    per_second: float  # messages delivered / (flush + send)
    send_per_second: float  # messages delivered / send alone
    detail: str = ""


def _send_all(kind: str, config: dict[str, Any], alerts: AlertStore, db: str, n_alerts: int,
              nodes: int, received: Callable[[], int], timeout_s: float) -> ThroughputResult:
    settings = NotifySettings(
        receivers=[ReceiverSettings(name=kind, type=kind, config=config)],
        route=RouteSettings(receiver=kind, group_by=["node"], group_wait_s=0.0,
                            group_interval_s=300.0, repeat_interval_s=4 * 3600.0))
    note = build_notification(settings, alerts, db, background=True)
    try:
        now = T0 + 10.0
        a = time.perf_counter()
        outs = note.dispatcher.flush(now)
        b = time.perf_counter()
        note.sender.submit(outs)
        done = note.sender.wait(timeout_s)
        c = time.perf_counter()
        sent = note.sender.drain()
        ok = sum(1 for s in sent if s.delivery.ok)
        bad = [s for s in sent if not s.delivery.ok]
        detail = "" if done else f"not all delivered within {timeout_s:g} s; "
        if bad:
            detail += f"{len(bad)} failed, e.g. {bad[0].delivery.detail}"
        return ThroughputResult(
            receiver_type=kind, alerts=n_alerts, nodes=nodes, messages=len(outs), delivered=ok,
            failed=len(bad), received_by_server=received(), flush_s=b - a, send_s=c - b,
            per_second=ok / (c - a) if c > a else 0.0,
            send_per_second=ok / (c - b) if c > b else 0.0, detail=detail)
    finally:
        note.close()


def bench_notify(tmp: Path, n_alerts: int, nodes: int,
                 timeout_s: float = 60.0) -> list[ThroughputResult]:
    alerts = AlertStore(str(tmp / "notify-alerts.db"))
    per_node = max(1, n_alerts // nodes)
    n = _fire(alerts, nodes, per_node, T0, np.random.default_rng(2))
    results: list[ThroughputResult] = []
    with http_server() as srv:
        url = f"http://{LOOPBACK}:{srv.server_address[1]}/hook"
        results.append(_send_all("webhook", {"url": url}, alerts, str(tmp / "n-webhook.db"),
                                 n, nodes, lambda: srv.requests, timeout_s))
    sink = _SmtpSink()
    with smtp_server(sink) as port:
        cfg = {"to": ["oncall@example.org"], "from_addr": "gpuhealth@example.org",
               "host": LOOPBACK, "port": port, "tls": "none", "hello": "bench.local"}
        results.append(_send_all("email", cfg, alerts, str(tmp / "n-email.db"), n, nodes,
                                 lambda: sink.accepted, timeout_s))
    alerts.close()
    return results


def dirty_flush(tmp: Path, nodes: int, per_node: int, repeats: int = 10) -> dict[str, Any]:
    """Dispatcher.flush marked dirty with nothing due, `nodes` x `per_node` alerts firing: what
    Pipeline.tick pays on every tick where any alert or flag changed."""
    db = str(tmp / f"regroup-{nodes}x{per_node}.db")
    alerts = AlertStore(db)
    n = _fire(alerts, nodes, per_node, T0, np.random.default_rng(3))
    settings = NotifySettings(route=RouteSettings(receiver="record", group_by=["node"],
                                                  group_wait_s=0.0))
    d = Dispatcher(settings, alerts, NotificationLog(db), SilenceStore(db))
    for o in d.flush(T0 + 10.0):
        d.done(o, True)
    times: list[float] = []
    for i in range(repeats):
        d.mark()
        a = time.perf_counter()
        d.flush(T0 + 11.0 + i)
        times.append(time.perf_counter() - a)
    alerts.close()
    med, p95 = _ms(times)
    return {"alerts": n, "groups": nodes, "median_ms": med, "p95_ms": p95}


# ---- main --------------------------------------------------------------------------------------

def run_all(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-alerting-") as d:
        tmp = Path(d)
        t = time.perf_counter()
        ev = bench_eval(args.gpus, args.links, args.ports, args.ticks, args.churn)
        ev.flush = bench_flush(tmp)
        out["evaluation"] = asdict(ev)
        # The record receiver logs every message at WARNING: not what this run is about.
        quiet = logging.getLogger("service.notify.record")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            rem = bench_remediation(tmp, args.rem_gpus, args.trials, args.warmup_rounds)
        finally:
            quiet.setLevel(level)
        out["remediation"] = asdict(rem)
        out["notifications"] = [asdict(r) for r in bench_notify(tmp, args.alerts, args.nodes)]
        # The same regroup at the notification storm's size and at what part 1's fleet had
        # firing (GPU, link and port alerts of 8 GPUs' worth per node, spread over its nodes).
        fleet_nodes = max(1, args.gpus // 8)
        out["dirty_flush"] = [
            dirty_flush(tmp, args.nodes, max(1, args.alerts // args.nodes)),
            dirty_flush(tmp, fleet_nodes, max(1, -(-ev.firing_at_end // fleet_nodes)))]
        out["wall_s"] = time.perf_counter() - t
    return out


def _f(x: float | None, unit: str = "ms", fmt: str = ".1f") -> str:
    return "n/a" if x is None else f"{x:{fmt}} {unit}"


def report(r: dict[str, Any]) -> None:
    ev, fl = r["evaluation"], r["evaluation"]["flush"]
    met = "met" if ev["step_p95_ms"] < ev["goal_ms"] else "NOT met"
    print(f"1. Alert evaluation per tick: {ev['gpus']:,} GPUs, {ev['links']:,} NVLink links, "
          f"{ev['ports']:,} IB ports ({ev['entities']:,} entities), {ev['ticks']} ticks")
    print(f"   AlertMachine.step, 3 scopes: median {ev['step_median_ms']:.1f} ms, "
          f"p95 {ev['step_p95_ms']:.1f} ms (goal < {ev['goal_ms']:.0f} ms: {met})")
    print("   per scope (median): " + ", ".join(
        f"{s} {v:.1f} ms" for s, v in ev["per_scope_median_ms"].items()))
    print(f"   transitions per tick: mean {ev['transitions_per_tick']:.1f}, "
          f"max {ev['max_transitions_in_a_tick']}; firing at the end: {ev['firing_at_end']:,}")
    print(f"   Dispatcher.flush, {fl['alerts']} alerts in {fl['groups']} groups: "
          f"nothing due {fl['idle_median_ms'] * 1e3:.0f} us (p95 {fl['idle_p95_ms'] * 1e3:.0f}"
          f" us); marked dirty, nothing due {fl['dirty_median_ms']:.2f} ms "
          f"(p95 {fl['dirty_p95_ms']:.2f}); all due {fl['due_median_ms']:.2f} ms "
          f"(p95 {fl['due_p95_ms']:.2f}) -> {fl['messages_when_due']} messages")
    if fl["messages_when_not_due"]:
        print(f"   WARNING: {fl['messages_when_not_due']} messages from flushes within the group "
              f"interval, where no group should be due (Dispatcher.flush's next_flush?)")
    rm = r["remediation"]
    print(f"2. Level-3 condition to migration hook call ({rm['gpus']:,} GPUs, path: "
          f"{rm['path']}; {rm['note']})")
    print(f"   tick {_f(rm['tick_median_ms'])}, tick start -> hook.execute called "
          f"{_f(rm['tick_to_call_median_ms'])}, -> drain script ran "
          f"{_f(rm['tick_to_script_median_ms'])}, hook's own run "
          f"{_f(rm['hook_run_median_ms'])} (medians of {len(rm['trials'])}; goal: one tick + "
          f"the hook)")
    for t in rm["trials"]:
        print(f"     {t['gpu']:<14} level 3 this tick: {'yes' if t['level3_in_tick'] else 'NO'}"
              f"  tick {_f(t['tick_s'] and t['tick_s'] * 1e3)}"
              f"  -> call {_f(t['tick_to_call_s'] and t['tick_to_call_s'] * 1e3)}"
              f"  -> script {_f(t['tick_to_script_s'] and t['tick_to_script_s'] * 1e3)}"
              f"  hook {_f(t['hook_run_s'] and t['hook_run_s'] * 1e3)}"
              + ("" if t["hook_called"] and t["hook_ok"] else f"  [{t['detail']}]"))
    if rm["call_after_tick_end"]:
        print(f"   hook called after tick() returned in {rm['call_after_tick_end']} of "
              f"{len(rm['trials'])} trials (it runs on the controller's worker thread)")
    print("3. Notifications per second, Dispatcher.flush + background Sender, loopback servers")
    for n in r["notifications"]:
        print(f"   {n['receiver_type']:<8} {n['alerts']:,} alerts on {n['nodes']} nodes -> "
              f"{n['messages']} messages: {n['delivered']} delivered "
              f"({n['received_by_server']} at the server), {n['failed']} failed; "
              f"{n['per_second']:.0f} msg/s (flush {n['flush_s'] * 1e3:.0f} ms + send "
              f"{n['send_s']:.2f} s = {n['send_per_second']:.0f} msg/s sending)"
              + (f"  [{n['detail']}]" if n["detail"] else ""))
    print("   Dispatcher.flush marked dirty, nothing due (every tick with a change): " + ", ".join(
        f"{x['alerts']:,} alerts in {x['groups']:,} groups {x['median_ms']:.1f} ms"
        for x in r["dirty_flush"]))
    print(f"(whole benchmark {r['wall_s']:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000, help="fleet size for alert evaluation")
    ap.add_argument("--links", type=int, default=18, help="NVLink links per GPU")
    ap.add_argument("--ports", type=int, default=8, help="IB ports per node")
    ap.add_argument("--ticks", type=int, default=200, help="timed evaluation ticks")
    ap.add_argument("--churn", type=int, default=5,
                    help="entities per scope moving between low and a level each tick")
    ap.add_argument("--rem-gpus", type=int, default=1000, help="fleet size of the pipeline run")
    ap.add_argument("--trials", type=int, default=5, help="level-3 faults injected")
    ap.add_argument("--warmup-rounds", type=int, default=24, help="pipeline rounds before them")
    ap.add_argument("--alerts", type=int, default=2000, help="alerts to notify")
    ap.add_argument("--nodes", type=int, default=500, help="nodes they are on (groups)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = run_all(args)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
