"""Hostile Arrow bodies against the real service (issue 29, defect 2).

- `serve` as a subprocess on loopback (as the issue measured it): bodies of one row behind
  500,000 dictionary keys (past what the store can hold: refused whole, 400, saying why) and
  400,000 (within it: taken for their row alone) leave its resident memory within a small
  bound, where each once added about 380 MB and held the parsers' lock for 8-17 s.
- the app under a real uvicorn: a line-protocol write, and another Arrow body, complete while
  an Arrow body is being decoded (the decode holds no lock another write needs).
"""

from __future__ import annotations

import gzip
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import uvicorn
import yaml

from bench.soak_stack import Proc, wait_healthy
from collectors.arrow_batch import MEDIA_TYPE, META_FORMAT, META_METRICS, encode
from collectors.catalog import Scope
from collectors.schema import SchemaMapper
from service.api.app import create_app
from service.settings import Settings
from tests.influx.server import free_port
from tests.support.fleet import T0

CLI = "import sys; from service.commands.cli import main; sys.exit(main())"
ARROW = {"Content-Type": MEDIA_TYPE, "Content-Encoding": "gzip"}
RSS_BOUND_MIB = 200  # four bodies; each added about 380 MB before
HELD = sum(Settings().ingest.limits().total(s) for s in Scope)  # entities the store can hold


def _one_row(tag: str, n_keys: int, row: int, ts: float) -> bytes:
    """A format-3 body: one gpu row naming key `row` of a dictionary of `n_keys` keys."""
    keys = pa.array([f"{tag}{i}:gpu0" for i in range(n_keys)], pa.string())
    ent = pa.DictionaryArray.from_arrays(pa.array([row], pa.int32()), keys)
    struct = pa.StructArray.from_arrays([ent, pa.array([ts])], names=["entity", "ts"])
    f = pa.field("gpu", pa.list_(struct.type), nullable=False, metadata={META_METRICS: b""})
    schema = pa.schema([f], metadata={META_FORMAT: b"3"})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(
            [pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), struct)], schema=schema))
    return bytes(out.getvalue())


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[str, Proc]]:
    port = free_port()
    cfg: dict[str, Any] = {
        "service": {"host": "127.0.0.1", "port": port},
        "storage": {"data_dir": str(tmp_path / "var")},
        "detectors": {"model": {"path": "none"}},
    }
    path = tmp_path / "gpuhealth.yaml"
    path.write_text(yaml.safe_dump(cfg))
    service = Proc("service", [sys.executable, "-c", CLI, "--log-level", "WARNING", "serve",
                               "--config", str(path), "--port", str(port)],
                   tmp_path / "service.log")
    service.start()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(service, url)
        yield url, service
    finally:
        service.stop()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_dictionary_floods_leave_memory_and_entities_alone(serve: tuple[str, Proc]) -> None:
    url, service = serve
    assert service.pid is not None
    now = time.time()
    with httpx.Client(timeout=120) as client:
        # pyarrow is imported, and its kernels set up, by the first Arrow body: not counted
        warm = encode(SchemaMapper().parse(f"gpu,host=warm,gpu=0 gpu_temp=40 {int(now * 1e9)}"))
        assert client.post(f"{url}/write", content=gzip.compress(warm),
                           headers=ARROW).status_code == 204
        before = _rss_mib(service.pid)
        assert 500_000 < HELD < 600_000  # GPUs, links, ports, supplies, fans and nodes
        for tag in ("big-a", "big-b"):  # past what the store holds: refused, saying why
            r = client.post(f"{url}/write", headers=ARROW,
                            content=gzip.compress(_one_row(tag, 600_000, 250_000, now)))
            assert r.status_code == 400, r.text
            problem = r.json()
            assert "arrow-payload-refused" in problem["type"]
            assert f"more than {HELD} keys" in problem["detail"]  # 540,000 by default
            assert "max_gpus" in problem["detail"]
        for tag in ("fit-a", "fit-b"):  # within it: taken for the one row it has
            r = client.post(f"{url}/write", headers=ARROW,
                            content=gzip.compress(_one_row(tag, 400_000, 123_456, now)))
            assert r.status_code == 204, r.text
        grown = _rss_mib(service.pid) - before
        assert grown < RSS_BOUND_MIB, f"resident memory grew {grown:.0f} MiB"
        for tag in ("fit-a", "fit-b"):
            assert client.get(f"{url}/v1/gpus/{tag}123456:gpu0").status_code == 200
            assert client.get(f"{url}/v1/gpus/{tag}7:gpu0").status_code == 404
        assert client.get(f"{url}/v1/gpus/big-a250000:gpu0").status_code == 404


# ---- an Arrow decode holds up no other write -------------------------------------------------

@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    app = create_app(Settings(storage={"data_dir": tmp_path / "var"}),  # type: ignore[arg-type]
                     clock=lambda: T0 + 1, schedule=False)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}/write", app
    finally:
        server.should_exit = True
        thread.join(timeout=20)


class _Post(threading.Thread):
    def __init__(self, url: str, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.args = (url, body, headers)
        self.status: int | None = None
        self.done = threading.Event()

    def run(self) -> None:
        url, body, headers = self.args
        try:
            self.status = httpx.post(url, content=body, headers=headers, timeout=120).status_code
        finally:
            self.done.set()


def test_writes_go_on_while_an_arrow_body_decodes(app_url: tuple[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Arrow body's decode is held open (as a long one would run); a line-protocol
    write and a second Arrow body are answered before it is let go. Before, the decode held
    the parsers' lock, and every other write waited for it."""
    from collectors.arrow_batch import Decoder

    url, _ = app_url
    real = Decoder.decode
    decoding, release = threading.Event(), threading.Event()
    first = threading.Lock()

    def held(self: Decoder, body: bytes, max_new: int | None = None) -> Any:
        if first.acquire(blocking=False):  # only the first body's decode waits
            decoding.set()
            release.wait(120)
        return real(self, body, max_new)

    monkeypatch.setattr(Decoder, "decode", held)
    ns = int((T0 + 1) * 1e9)
    # over the lean route's inline size (64 KiB), so decoded in a worker thread
    big = _one_row("slow", 6_000, 5, T0 + 1)
    assert len(big) > 64 * 1024
    slow = _Post(url, big, {"Content-Type": MEDIA_TYPE})
    slow.start()
    try:
        assert decoding.wait(60), "the first Arrow body never reached its decode"
        lines = _Post(url, f"gpu,host=lp,gpu=0 gpu_temp=41 {ns}\n".encode(),
                      {"Content-Type": "text/plain"})
        lines.start()
        lines.done.wait(60)
        other = _Post(url, encode(SchemaMapper().parse(f"gpu,host=ar,gpu=0 gpu_temp=42 {ns}")),
                      {"Content-Type": MEDIA_TYPE})
        other.start()
        other.done.wait(60)
        order = (lines.status, other.status, slow.done.is_set(), release.is_set())
    finally:
        release.set()
        slow.join(120)
    assert order == (204, 204, False, False), order
    assert slow.status == 204


def test_the_coalescers_key_cache_is_bounded_by_keys_not_only_tables() -> None:
    """Arrow bodies choose their tables' sizes (up to a body's rows): the coalescer's cache
    of each table's keys lets the least recent go past `max_entities` keys held, not only past a
    count."""
    import numpy as np

    from collectors.frames import Entity, EntityTable
    from service.api.coalesce import PlanCache

    cache = PlanCache(max_tables=1_000, max_entities=1_000)
    tables = [EntityTable(Scope.GPU, [Entity.gpu(f"t{t}n{i}", 0) for i in range(400)])
              for t in range(5)]  # all alive: only the entity bound can let them go
    for t in tables:
        assert len(cache.keys(t, np.arange(400, dtype=np.int32))) == 400
        assert cache._keys.entities <= 1_000
    assert len(cache._keys) == 2  # 400 + 400 fit, a third did not: least recent out
