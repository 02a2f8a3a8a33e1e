"""The fuzz benchmark (issues 14 and 29, docs/fuzz.md): the real service, started as a
subprocess on loopback with its embedded SQLite store, rules only, remediation in auto mode
with a command hook that appends each drained node to a file, the breaker opened wide so any
drain shows, and notifications of level 2 and above routed to a real webhook receiver on
loopback. At least N generated inputs go in: line-protocol `/write` requests of 1 to 200
lines of every hostile class (bench.fuzz_inputs) with valid canary lines mixed in, and
meanwhile, each in its own thread, the other surfaces' classes (bench.fuzz_run_surfaces:
Arrow bodies, silences, auth failures, slow clients, relay bodies, shard headers, API
requests). A process of its own polls /healthz every 20 ms, and the service's peak resident
memory is read from /proc each second. Then the canaries
are read back through the history API and the notifications counted.

    python -m bench.fuzz [--inputs 100000] [--seed 14] [--classes arrow,silences,...] [--json]

Exit 0 when every goal holds: no 5xx, no crash, /healthz never stalled 250 ms, no canary
lost, resident memory within its bound, no drain, no page and no notification naming a
phantom node; 1 when one is missed; 2 when the service could not be run."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import fuzz_run_notify
from bench.fuzz_inputs import CANARY_HOSTS, FUZZ_HOSTS, Mixer, Request
from bench.fuzz_run_surfaces import CLASSES, Surfaces, Target
from bench.soak_stack import REPO, Proc, wait_healthy
from tests.influx.server import free_port

CLI = "import sys; from service.commands.cli import main; sys.exit(main())"

log = logging.getLogger(__name__)
STEP_S = 5.0  # collect_interval_s: canaries are one per GPU per step
POLL_S = 0.02
PROBE_TIMEOUT_S = 5.0
STALL_GOAL_MS = 250.0  # on a loaded 2-core machine (issue 29)
RUN_LIMIT_S = 900.0  # the send loop stops here whatever N is
SETTLE_S = 8.0  # scoring ticks after the last write: a drain they request still shows


@dataclass
class Report:
    inputs: int = 0
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    by_class: dict[str, int] = field(default_factory=dict)  # lines per class, bodies per kind
    status_5xx: int = 0
    transport_errors: int = 0
    crashes: int = 0
    healthz_max_ms: float = 0.0
    healthz_polls: int = 0
    healthz_p99_ms: float = 0.0  # one outlier decides the goal; these show the rest
    healthz_over_100ms: int = 0
    # The slowest polls: (wall time the answer came, ms, what was in flight), for matching
    # against the service's log.
    healthz_slowest: list[tuple[float, float, str]] = field(default_factory=list)
    healthz_worst_during: str = ""  # what was in flight at the longest poll, per class
    canaries_sent: int = 0
    canaries_lost: int = 0
    canaries_wrong: int = 0
    rss_start_mib: float = 0.0
    rss_peak_mib: float = 0.0
    rss_growth_mib: float = 0.0
    rss_bound_mib: float = 0.0  # start + window memory at the entity limit, twice, + WORK_MIB
    drains: int = 0
    notifications: int = 0  # webhook posts of level 2 and above
    pages: int = 0  # level-3 alerts notified (no valid input can cause one)
    level2: int = 0  # level-2 alerts notified
    level2_phantom: int = 0  # ... of them naming a node no valid input names
    phantom_nodes: list[str] = field(default_factory=list)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the other surfaces
    gpus_held: int = 0  # GPU entities in the window store at the end (limit: MAX_GPUS)
    gpus_refused: int = 0  # new GPUs the entity limits refused
    send_s: float = 0.0
    inputs_per_s: float = 0.0
    missed: list[str] = field(default_factory=list)


MAX_GPUS = 2_000  # the entity limit the run holds the service to (names flood past it)
WORK_MIB = 128.0  # requests in flight: bodies inflated and parsed, the allocator's arenas
KNOWN_NODES = frozenset(FUZZ_HOSTS) | frozenset(CANARY_HOSTS)


def window_bytes_per_gpu(step_s: float = STEP_S) -> int:
    """Window memory one GPU may take at the run's step: its own windows and those of the
    links and ports the entity limits allow per GPU (service.stages.windows), measured on a
    store of the service's own layout."""
    from service.stages.windows import EntityLimits, WindowStore, window_config_for

    limits = EntityLimits(max_gpus=MAX_GPUS)
    store = WindowStore(window_config_for(step_s), limits)
    per = {s: w.nbytes() / w.capacity for s, w in store.scopes.items()}
    return round(sum(per[s] * limits.total(s) / limits.max_gpus for s in per))


def rss_bound_mib(start_mib: float) -> float:
    """The resident memory the run may reach: what the service held at start, the windows of
    `MAX_GPUS` GPUs twice over (a growth copies an array; freed pages the allocator keeps)
    and WORK_MIB for the requests in flight."""
    return round(start_mib + 2 * MAX_GPUS * window_bytes_per_gpu() / 2**20 + WORK_MIB, 1)


def config(root: Path, port: int, drain_file: Path, receiver_url: str) -> dict[str, Any]:
    return {
        "service": {"host": "127.0.0.1", "port": port, "collect_interval_s": STEP_S,
                    "score_interval_s": 2.0},
        "ingest": {"max_gpus": MAX_GPUS, "max_new_gpus_per_batch": 200},
        "storage": {"data_dir": str(root / "var")},
        "detectors": {"model": {"path": "none"}},
        "remediation": {
            "mode": "auto", "hook": "command",
            "hook_config": {"drain": ["/bin/sh", "-c", f"echo \"$1\" >> {drain_file}", "sh",
                                      "{node}"],
                            "release": ["/bin/sh", "-c", "true"]},
            "breaker_max_fraction": 1.0, "breaker_max_nodes": 1000,
            # The fleet the valid input is: the breaker judges against it, never phantoms.
            "fleet_size": len(KNOWN_NODES)},
        "notify": fuzz_run_notify.route(receiver_url),
    }


def metric(client: httpx.Client, url: str, name: str) -> float | None:
    """One sample of the service's /metrics, by its name and labels as printed."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        r = client.get(f"{url}/metrics", timeout=PROBE_TIMEOUT_S)
        for line in r.text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def rss_mib(pid: int | None, field: str = "VmRSS") -> float | None:
    """The service's resident memory (VmRSS), or its peak so far (VmHWM: the kernel's
    high-water mark, which no sampling misses), read from /proc: scraping /metrics each second
    cost the service a render of every series, which the run then counted against it."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# The /healthz prober is a process of its own, as a liveness probe is: polled from a thread
# of this process, every stall of the sender threads' own GIL (building bodies, compressing,
# generating inputs) was counted as the service's.
PROBE = """
import http.client, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); every = float(sys.argv[2]); limit = float(sys.argv[3])
conn = None
while True:
    t0 = time.perf_counter()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=limit)
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        conn = None
    print(f"{(time.perf_counter() - t0) * 1e3:.1f}", flush=True)
    time.sleep(every)
"""


SLOW_MS, KEEP_SLOWEST = 100.0, 10  # the slowest polls the report lists


class Watch:
    """Polls /healthz every 20 ms from a process of its own (the longest answer is the stall)
    and reads the service's peak resident memory each second."""

    def __init__(self, url: str, report: Report, others: dict[str, str],
                 pid: Callable[[], int | None]) -> None:
        self.url, self.report, self.pid = url, report, pid
        self.in_flight = ""  # set by the sender: what /write is handling now
        self.others = others  # the other classes' requests in flight (Target.in_flight)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fuzz-watch", daemon=True)
        self._probes = threading.Thread(target=self._read_probes, name="fuzz-probe", daemon=True)
        self._probe: subprocess.Popen[str] | None = None
        self.took: list[float] = []

    def start(self) -> None:
        self._probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, self.url, str(POLL_S), str(PROBE_TIMEOUT_S)],
            stdout=subprocess.PIPE, text=True)
        self._probes.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._probe is not None:
            self._probe.kill()
            self._probe.wait()
        for t in (self._probes, self._thread):
            if t.is_alive():  # never started when the service did not come up
                t.join(timeout=PROBE_TIMEOUT_S * 3)
        if self.took:
            ranked = sorted(self.took)
            self.report.healthz_p99_ms = round(ranked[int(0.99 * (len(ranked) - 1))], 1)
            self.report.healthz_over_100ms = sum(t >= 100 for t in ranked)

    def during(self) -> str:
        others = [f"{k}: {v}" for k, v in sorted(dict(self.others).items())]
        return "; ".join([f"write: {self.in_flight or 'start'}", *others])

    def _read_probes(self) -> None:
        """Each poll's answer time as the prober prints it; what was in flight is read as it
        arrives (a pipe's hop later: within a poll's time of the stall)."""
        rep, probe = self.report, self._probe
        assert probe is not None and probe.stdout is not None
        for line in probe.stdout:
            try:
                took = float(line)
            except ValueError:
                continue
            if took > rep.healthz_max_ms:
                rep.healthz_max_ms, rep.healthz_worst_during = took, self.during()
            rep.healthz_polls += 1
            self.took.append(took)
            if took >= SLOW_MS:
                rep.healthz_slowest.append((round(time.time(), 3), took, self.during()))
                rep.healthz_slowest.sort(key=lambda s: -s[1])
                del rep.healthz_slowest[KEEP_SLOWEST:]

    def _run(self) -> None:
        rep = self.report
        while True:
            got = rss_mib(self.pid(), "VmHWM")
            if got is not None:
                rep.rss_peak_mib = max(rep.rss_peak_mib, got)
            if self._stop.wait(1.0):
                break


def send(client: httpx.Client, url: str, req: Request, rep: Report) -> bool:
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    if req.gzip:
        headers["Content-Encoding"] = "gzip"
    try:
        r = client.post(f"{url}/write", content=req.body, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        rep.transport_errors += 1
        log.warning("write failed (%s): %s", req.kind, exc)
        return False
    rep.by_status[str(r.status_code)] = rep.by_status.get(str(r.status_code), 0) + 1
    if failed(r):
        rep.status_5xx += 1
        log.warning("5xx on a %s body: %s %s", req.kind, r.status_code, r.text[:300])
    return r.status_code < 500  # a 503's canaries were not taken: none to read back


def failed(r: httpx.Response) -> bool:
    """A 5xx, except a 503 with Retry-After: a refusal to be sent again (new entities past
    one request's share, issue 29), which senders honour."""
    return r.status_code >= 500 and not (r.status_code == 503 and "retry-after" in r.headers)


def read_back(client: httpx.Client, url: str, sent: dict[str, dict[int, float]]
              ) -> tuple[int, int]:
    """(lost, wrong): canary points absent from the history API, and present with another
    value."""
    lost = wrong = 0
    for key, points in sent.items():
        lo, hi = min(points), max(points) + int(STEP_S)
        r = client.get(f"{url}/v1/gpus/{key}/metrics",
                       params={"metric": "gpu_temp", "from": lo, "to": hi, "step": int(STEP_S)},
                       timeout=30.0)
        got: dict[int, float] = {}
        if r.status_code == 200:
            for s in r.json()["series"]:
                got = {int(t): v for t, v in zip(s["times"], s["values"], strict=True)}
        else:
            log.warning("history of %s: %s %s", key, r.status_code, r.text[:200])
        for ts, v in points.items():
            if ts not in got:
                lost += 1
            elif not math.isclose(got[ts], v, abs_tol=1e-6):
                wrong += 1
    return lost, wrong


CONTROL = "xid,host=fz00,gpu=0 code=79i\n"  # a real hard failure (fallen off the bus)


def make_token(cfg_path: Path, root: Path) -> str:
    """An operate-scope API token in the run's state store, made before the service starts."""
    argv = [sys.executable, "-c", CLI, "token", "create", "--config", str(cfg_path),
            "--name", "fuzz", "--scope", "operate"]
    got = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120, check=False)
    if got.returncode != 0 or not got.stdout.strip():
        raise RuntimeError(f"could not make an API token: {got.stderr.strip()[-500:]}")
    return got.stdout.strip().splitlines()[-1]


def run(n_inputs: int, seed: int, root: Path, control: bool = False,
        classes: list[str] | None = None) -> Report:
    rep = Report()
    port, drain_file = free_port(), root / "drains.txt"
    url = f"http://127.0.0.1:{port}"
    receiver = fuzz_run_notify.start(root)
    cfg_path = root / "gpuhealth.yaml"
    cfg_path.write_text(yaml.safe_dump(config(root, port, drain_file, receiver.url),
                                       sort_keys=False))
    argv = [sys.executable, "-c", CLI,
            "--log-level", "WARNING", "serve", "--config", str(cfg_path), "--port", str(port)]
    service = Proc("service", argv, root / "service.log")
    sent: dict[str, dict[int, float]] = defaultdict(dict)
    surfaces: Surfaces | None = None
    watch: Watch | None = None
    try:
        target = Target(url, root, make_token(cfg_path, root), KNOWN_NODES)
        surfaces = Surfaces(list(CLASSES) if classes is None else classes, target, seed)
        watch = Watch(url, rep, target.in_flight, lambda: service.pid)
        service.start()
        wait_healthy(service, url)
        with httpx.Client() as client:
            rep.rss_start_mib = rss_mib(service.pid) or 0.0
            rep.rss_peak_mib = rep.rss_start_mib
            mixer = Mixer(seed, STEP_S)
            watch.start()
            t0 = time.monotonic()
            first = True
            # At least half of the inputs are /write's, so its whole mix is always covered.
            while ((rep.inputs + surfaces.inputs < n_inputs or rep.inputs < n_inputs // 2)
                   and time.monotonic() - t0 < RUN_LIMIT_S):
                req = mixer.request(time.time())
                watch.in_flight = req.kind
                if send(client, url, req, rep):
                    for key, ts, v in req.canaries:
                        sent[key][ts] = v
                if first:  # the fleet reports before any attacker of another surface starts
                    surfaces.start()
                    first = False
                rep.inputs += req.inputs
                rep.requests += 1
                watch.in_flight = "idle"
                if service.pid is None:
                    break
            surfaces.stop()
            rep.by_class = dict(sorted(mixer.counts.items()))
            if control:  # proves a drain shows: the run must then miss the drain goal
                client.post(f"{url}/write", content=CONTROL, timeout=60.0)
            rep.inputs += surfaces.inputs
            rep.send_s = round(time.monotonic() - t0, 1)
            rep.inputs_per_s = round(rep.inputs / max(rep.send_s, 1e-3))
            if service.pid is not None:
                time.sleep(SETTLE_S)
            watch.stop()
            rep.canaries_sent = sum(len(p) for p in sent.values())
            if service.pid is None:
                rep.crashes = 1
            else:
                rep.canaries_lost, rep.canaries_wrong = read_back(client, url, sent)
                rep.gpus_held = int(metric(client, url, 'gpuhealth_entities{scope="gpu"}') or 0)
                rep.gpus_refused = int(metric(
                    client, url, 'gpuhealth_entities_refused_total{scope="gpu"}') or 0)
    finally:
        if surfaces is not None:
            surfaces.stop()
            for proc in surfaces.target.procs:
                proc.stop()
        if watch is not None:
            watch.stop()
        service.stop()
        receiver.stop()
    if rep.crashes == 0 and service.proc is not None and service.proc.returncode not in (0, -15):
        rep.crashes = 1  # it died on the way down
    rep.drains = len(drain_file.read_text().splitlines()) if drain_file.exists() else 0
    told = fuzz_run_notify.count(receiver, KNOWN_NODES)
    rep.notifications, rep.pages, rep.level2 = told.notifications, told.pages, told.level2
    rep.level2_phantom, rep.phantom_nodes = told.level2_phantom, told.phantom_nodes
    rep.classes = {n: st.report() for n, st in surfaces.stats.items()}
    rep.rss_growth_mib = round(rep.rss_peak_mib - rep.rss_start_mib, 1)
    rep.rss_bound_mib = rss_bound_mib(rep.rss_start_mib)
    rep.healthz_max_ms = round(rep.healthz_max_ms, 1)
    rep.missed = judge(rep, n_inputs)
    return rep


def judge(rep: Report, n_inputs: int) -> list[str]:
    missed = []
    if rep.inputs < n_inputs:
        missed.append(f"only {rep.inputs} of {n_inputs} inputs sent")
    if rep.status_5xx or rep.transport_errors:
        missed.append(f"{rep.status_5xx} 5xx, {rep.transport_errors} failed requests")
    for name, c in rep.classes.items():
        if c["status_5xx"] or c["transport_errors"]:
            missed.append(f"{name}: {c['status_5xx']} 5xx, {c['transport_errors']} failed "
                          "requests")
    if rep.crashes:
        missed.append("the service exited")
    if rep.healthz_max_ms >= STALL_GOAL_MS:
        missed.append(f"/healthz stalled {rep.healthz_max_ms} ms (goal < {STALL_GOAL_MS:g})")
    if rep.canaries_lost or rep.canaries_wrong or rep.canaries_sent == 0:
        missed.append(f"canaries: {rep.canaries_lost} lost, {rep.canaries_wrong} wrong of "
                      f"{rep.canaries_sent}")
    if rep.rss_peak_mib > rep.rss_bound_mib:
        missed.append(f"RSS peaked at {rep.rss_peak_mib:.0f} MiB (bound {rep.rss_bound_mib:.0f})")
    if rep.drains:
        missed.append(f"{rep.drains} drains requested")
    if rep.pages:
        missed.append(f"{rep.pages} pages notified")
    if rep.level2_phantom:
        missed.append(f"{rep.level2_phantom} level-2 notifications of phantom nodes")
    if rep.gpus_held > MAX_GPUS:
        missed.append(f"{rep.gpus_held} GPUs held past the limit of {MAX_GPUS}")
    return missed


def render(rep: Report) -> str:
    def cls(c: dict[str, Any]) -> str:
        answers = " ".join(f"{k}:{v}" for k, v in sorted(c["by_status"].items()))
        figs = " ".join(f"{k}={v:g}" for k, v in sorted(c["figures"].items()))
        return f"{c['inputs']} inputs, {answers}{' (' + figs + ')' if figs else ''}"

    rows = [("inputs sent", rep.inputs), ("/write requests", rep.requests),
            ("/write answers", " ".join(f"{k}:{v}" for k, v in sorted(rep.by_status.items()))),
            ("/write classes", " ".join(f"{k}:{v}" for k, v in rep.by_class.items())),
            *((f"class {n}", cls(c)) for n, c in rep.classes.items()),
            ("5xx (goal 0)", rep.status_5xx + sum(c["status_5xx"] for c in rep.classes.values())),
            ("crashes (goal 0)", rep.crashes),
            (f"longest /healthz ms (goal < {STALL_GOAL_MS:g})",
             f"{rep.healthz_max_ms} (during: {rep.healthz_worst_during or 'start'})"),
            ("/healthz p99 ms, polls of 100 ms or more",
             f"{rep.healthz_p99_ms}, {rep.healthz_over_100ms} of {rep.healthz_polls}"),
            ("canaries lost (goal 0)", f"{rep.canaries_lost} of {rep.canaries_sent}"
             f" ({rep.canaries_wrong} with another value)"),
            ("RSS MiB (goal within bound)", f"{rep.rss_start_mib:.1f} -> {rep.rss_peak_mib:.1f}"
             f" (bound {rep.rss_bound_mib:.0f})"),
            ("drains requested (goal 0)", rep.drains),
            ("pages notified (goal 0)", rep.pages),
            ("level-2 notified", f"{rep.level2} ({rep.level2_phantom} of phantom nodes, goal 0;"
             f" {rep.notifications} webhook posts)"),
            (f"GPUs held (limit {MAX_GPUS})", f"{rep.gpus_held} ({rep.gpus_refused} refused)"),
            ("send time s", f"{rep.send_s} ({rep.inputs_per_s} inputs/s)")]
    out = "\n".join(f"{k:<34} {v}" for k, v in rows)
    return out + ("\nall goals held" if not rep.missed else "\nMISSED: " + "; ".join(rep.missed))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz",
                                description="The fuzz benchmark (docs/fuzz.md).")
    p.add_argument("--inputs", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--json", action="store_true")
    p.add_argument("--control", action="store_true",
                   help="also send one valid hard failure (XID 79): the drain must show")
    p.add_argument("--classes", default=",".join(CLASSES),
                   help="the surfaces fuzzed beside /write, comma-separated (empty: none); "
                        f"default all: {','.join(CLASSES)}")
    p.add_argument("--dir", type=Path, help="keep the service's data and log here (a new or "
                   "empty directory: a kept store would be warm-started, and the same seed's "
                   "names then have a history)")
    args = p.parse_args(argv)
    classes = [c for c in args.classes.split(",") if c]
    unknown = sorted(set(classes) - set(CLASSES))
    if unknown:
        p.error(f"unknown classes: {', '.join(unknown)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with contextlib.ExitStack() as stack:
        root = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        if args.dir is not None and any(root.iterdir()):
            p.error(f"--dir {root} is not empty: a run starts from no data")
        try:
            rep = run(args.inputs, args.seed, root, args.control, classes)
        except RuntimeError as exc:
            print(f"bench.fuzz: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(asdict(rep), indent=1) if args.json else render(rep))
    return 1 if rep.missed else 0


if __name__ == "__main__":
    sys.exit(main())
