"""What the soak watches while it runs, once a second: the service's `/metrics` (scoring ticks
run and failed, tick durations, samples ingested and refused) read on both sides of a
`/readyz` call, so readiness is compared only with a tick state that did not change while it
was asked; and the service's resident memory from /proc (the service's /metrics has no
process metrics: its registry is built per app, without prometheus_client's process
collector)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

PERIOD_S = 1.0
PHASE = "phase:"  # parse_metrics' key prefix for the tick phases


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float
    pid: int | None  # the service process this was read from (None: not running)
    up: bool  # /metrics answered
    ready: bool | None  # None: /readyz did not answer
    ready_reasons: tuple[str, ...]
    steady: bool  # tick counts equal before and after /readyz
    ticks: float = 0.0
    tick_errors: float = 0.0
    tick_skipped: float = 0.0
    tick_sum: float = 0.0
    tick_count: float = 0.0
    ingested: float = 0.0
    rejected: float = 0.0
    rss_bytes: float = 0.0
    phases: tuple[tuple[str, float], ...] = ()  # seconds per tick phase, summed since start


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            job = s.labels.get("job")
            if s.name == "gpuhealth_score_ticks_total":
                out["ticks"] = s.value
            elif s.name == "gpuhealth_job_errors_total" and job == "score":
                out["tick_errors"] = s.value
            elif s.name == "gpuhealth_ticks_skipped_total" and job == "score":
                out["tick_skipped"] = s.value
            elif s.name == "gpuhealth_score_tick_seconds_sum":
                out["tick_sum"] = s.value
            elif s.name == "gpuhealth_score_tick_seconds_count":
                out["tick_count"] = s.value
            elif s.name == "gpuhealth_samples_ingested_total":
                out["ingested"] = s.value
            elif s.name == "gpuhealth_samples_rejected_total":
                out["rejected"] = s.value
            elif s.name == "gpuhealth_score_tick_phase_seconds_total":
                out[PHASE + s.labels.get("phase", "")] = s.value
    return out


def rss_of(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024
    return 0.0


class Probe:
    def __init__(self, url: str, pid: Callable[[], int | None]) -> None:
        self.url, self.pid = url, pid
        self.client = httpx.Client(timeout=3.0)
        self.snapshots: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()

    def _metrics(self) -> dict[str, float] | None:
        try:
            r = self.client.get(f"{self.url}/metrics")
        except httpx.HTTPError:
            return None
        return parse_metrics(r.text) if r.status_code == 200 else None

    def once(self) -> Snapshot:
        pid = self.pid()
        t0 = time.time()
        before = self._metrics()
        ready: bool | None = None
        reasons: tuple[str, ...] = ()
        try:
            r = self.client.get(f"{self.url}/readyz")
            ready = r.status_code == 200
            reasons = tuple(str(x) for x in r.json().get("reasons", []))
        except (httpx.HTTPError, ValueError):
            pass
        after = self._metrics()
        if before is None or after is None:
            return Snapshot(t0, pid, False, ready, reasons, False, rss_bytes=rss_of(pid))
        steady = all(before.get(k) == after.get(k) for k in ("ticks", "tick_errors"))
        return Snapshot(t0, pid, True, ready, reasons, steady, after.get("ticks", 0.0),
                        after.get("tick_errors", 0.0), after.get("tick_skipped", 0.0),
                        after.get("tick_sum", 0.0), after.get("tick_count", 0.0),
                        after.get("ingested", 0.0), after.get("rejected", 0.0), rss_of(pid),
                        tuple((k.removeprefix(PHASE), v) for k, v in sorted(after.items())
                              if k.startswith(PHASE)))

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self.snapshots.append(self.once())
            self._stop.wait(max(0.0, PERIOD_S - (time.monotonic() - t)))
