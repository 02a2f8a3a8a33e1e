"""A real service (its lean write route, uvicorn on loopback in a thread) whose one sink records
every sample it stored, for the relay's tests: (entity key, ts, metric, value) rows, counted."""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import uvicorn

from collectors.catalog import CATALOG
from collectors.frames import Batch
from service.api.app import create_app
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.ingest import IngestResult
from tests.support.fleet import T0

SERVICE_TOKEN = "relay-test-service-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(batch: Batch) -> Counter[tuple[str, float, str, float]]:
    """Every reported cell and event of a batch, counted."""
    out: Counter[tuple[str, float, str, float]] = Counter()
    for scope, f in batch.frames.items():
        names = [m.name for m in CATALOG.columns(scope)]
        for slot, ts, row in zip(f.rows.tolist(), f.ts.tolist(), f.values.tolist(), strict=True):
            key = f.entities[slot].key
            for j, v in enumerate(row):
                if not math.isnan(v):
                    out[(key, ts, names[j], v)] += 1
    ev = batch.events
    for key, ts, metric, value in zip(ev.keys, ev.ts, ev.metrics, ev.values, strict=True):
        out[(key, ts, metric, value)] += 1
    return out


class Recorder:
    def __init__(self) -> None:
        self.got: Counter[tuple[str, float, str, float]] = Counter()
        self.requests = 0

    def write(self, result: IngestResult) -> None:
        self.got += samples(result.clean)


class Service:
    """Started on `port` (a fresh one by default); `url` is its /write."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root, self.port = root, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/write"
        self.recorder = Recorder()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Service:
        settings = Settings(storage={"data_dir": self.root},  # type: ignore[arg-type]
                            ingest={"tokens": [SERVICE_TOKEN],  # type: ignore[arg-type]
                                    "coalesce_ms": 5})

        def pipeline() -> Pipeline:
            return build_pipeline(settings, Wiring.offline(sinks=(self.recorder,),
                                                           influxdb=False, notifiers=None))

        app: Any = create_app(pipeline, clock=lambda: T0 + 1, schedule=False)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "the service did not start"
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=20)
        self._server = self._thread = None
