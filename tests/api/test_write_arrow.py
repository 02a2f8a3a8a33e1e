"""Arrow IPC writes over real HTTP on loopback: the lean route ingests them like line protocol,
refuses a malformed one (or one in the retired formats 1 and 2) whole, nothing ingested, the
FastAPI route reads them too, and the agent's Pusher sends line protocol to a target that does
not read Arrow or refuses a segment."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from collectors.agent.push import Outcome, Pusher
from collectors.arrow_batch import MEDIA_TYPE, META_FORMAT, META_METRICS, encode
from collectors.frames import Entity
from collectors.schema import SchemaMapper
from service.api.app import create_app
from service.settings import Settings
from tests.support.fleet import T0

NS = int(T0 * 1e9)
LINES = "".join(f"gpu,host=n001,gpu={g} gpu_temp={40 + g}.5,ecc_sbe_volatile={g}i {NS}\n"
                for g in range(4))


@pytest.fixture
def services(tmp_path: Path) -> Iterator[dict[str, tuple[str, object]]]:
    """name -> (write URL, app): "lean" and "fastapi" (lean_write=False), both read Arrow."""
    out: dict[str, tuple[str, object]] = {}
    servers = []
    for name, lean in (("fastapi", False), ("lean", True)):
        app = create_app(Settings(storage={"data_dir": tmp_path / name}),  # type: ignore[arg-type]
                         clock=lambda: T0 + 1, schedule=False, lean_write=lean)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        out[name] = (f"http://127.0.0.1:{port}/write", app)
    deadline = time.monotonic() + 20
    while not all(s.started for s, _ in servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(s.started for s, _ in servers)
    try:
        yield out
    finally:
        for server, thread in servers:
            server.should_exit = True
            thread.join(timeout=20)


def _held(app: object, key: str) -> bool:
    store = app.state.gpuhealth.pipeline.store  # type: ignore[attr-defined]
    e = Entity.parse(key)
    return store[e.scope].slot(e) is not None


def _arrow(text: str = LINES) -> bytes:
    return encode(SchemaMapper().parse(text))


def _format_2(key: str, temp: float) -> bytes:
    """One gpu row as agents wrote it before format 3 (a stream per kind, its kind in the
    schema metadata): valid then, retired now."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({
        "entity": pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array([key])),
        "ts": pa.array([T0]),
        "values": pa.FixedSizeListArray.from_arrays(pa.array([temp]), 1)})
    meta = {META_FORMAT: b"2", b"gpuhealth.kind": b"gpu", META_METRICS: b"gpu_temp"}
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, table.schema.with_metadata(meta)) as w:
        w.write_table(table.replace_schema_metadata(meta))
    return bytes(out.getvalue())


def test_arrow_is_ingested_like_line_protocol(services: dict[str, tuple[str, object]]) -> None:
    url, app = services["lean"]
    r = httpx.post(url, content=gzip.compress(_arrow()),
                   headers={"Content-Type": MEDIA_TYPE, "Content-Encoding": "gzip"})
    assert r.status_code == 204, r.text
    assert r.headers["x-gpuhealth-payload"] == "arrow"
    assert all(_held(app, f"n001:gpu{g}") for g in range(4))
    # the ingest stage's checks apply: a negative counter is refused by entity, the rest kept
    bad = LINES.replace("ecc_sbe_volatile=2i", "ecc_sbe_volatile=1i").replace(
        str(NS), str(NS + 5_000_000_000)).replace("gpu=3 gpu_temp=43.5", "gpu=3 gpu_temp=1e300")
    r = httpx.post(url, content=_arrow(bad), headers={"Content-Type": MEDIA_TYPE})
    assert r.status_code == 400, r.text
    said = r.json()
    assert said["rejected"] >= 1 and said["accepted"] >= 1
    assert any(x["entity"] == "n001:gpu3" for x in said["rejections"])


def test_a_malformed_payload_is_refused_whole(services: dict[str, tuple[str, object]]) -> None:
    url, app = services["lean"]
    now = _arrow("gpu,host=n009,gpu=0 gpu_temp=40 " + str(NS) + "\n")  # one valid stream
    old = _format_2("n009:gpu0", 40.0)  # the retired format 2: refused, however valid
    for body, says in ((now + now, "one stream; more follows"), (now[:-30], "truncated"),
                       (old, "'gpuhealth.format' must be '3'"),
                       (old + now, "'gpuhealth.format' must be '3'")):
        r = httpx.post(url, content=body, headers={"Content-Type": MEDIA_TYPE})
        assert r.status_code == 400, r.text
        assert "Arrow payload refused, nothing written" in r.json()["error"]
        assert says in r.json()["error"]
        assert r.json()["accepted"] == 0
    assert not _held(app, "n009:gpu0")  # a valid stream before or in it was not ingested


def test_the_fastapi_route_reads_arrow(services: dict[str, tuple[str, object]]) -> None:
    url, app = services["fastapi"]
    r = httpx.post(url, content=_arrow(), headers={"Content-Type": MEDIA_TYPE})
    assert r.status_code == 204, r.text
    assert r.headers["x-gpuhealth-payload"] == "arrow"
    assert _held(app, "n001:gpu3")


def test_the_agent_sends_arrow_to_either_route(services: dict[str, tuple[str, object]]) -> None:
    segment = gzip.compress(LINES.encode())
    lean_url, _ = services["lean"]
    p = Pusher(lean_url)
    assert p.push(segment).outcome is Outcome.SENT
    assert (p.sent_arrow, p.sent_lines) == (1, 0)
    fast_url, fast_app = services["fastapi"]
    p = Pusher(fast_url)
    assert p.push(segment).outcome is Outcome.SENT
    assert (p.sent_arrow, p.sent_lines) == (1, 0)
    assert _held(fast_app, "n001:gpu3")


class _Influx(threading.Thread):
    """An InfluxDB-like stub: reads every body as line protocol, so Arrow is a 400."""

    def __init__(self) -> None:
        import http.server

        seen: list[str] = []
        self.seen = seen

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                seen.append(self.headers["Content-Type"])
                ok = self.headers["Content-Type"].startswith("text/plain")
                self.send_response(204 if ok else 400)
                msg = b"" if ok else b'{"error":"unable to parse \'\\xff\\xff\': bad timestamp"}'
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                del body

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), H)
        super().__init__(target=self.server.serve_forever, daemon=True)


def test_the_agent_falls_back_for_influxdb() -> None:
    stub = _Influx()
    stub.start()
    try:
        p = Pusher(f"http://127.0.0.1:{stub.server.server_address[1]}/write")
        assert p.push(gzip.compress(LINES.encode())).status == 204
        assert p.push(gzip.compress(LINES.encode())).status == 204
    finally:
        stub.server.shutdown()
    assert stub.seen == [MEDIA_TYPE, "text/plain; charset=utf-8", "text/plain; charset=utf-8"]


class _RefusingService(threading.Thread):
    """A service that refuses every Arrow body whole, as ours does one in a format it does
    not read (400 `arrow-payload-refused` naming gpuhealth.format, with
    `X-Gpuhealth-Payload: arrow`), and takes line protocol, keeping each body's lines."""

    def __init__(self) -> None:
        import http.server

        seen: list[str] = []
        lines: list[str] = []
        self.seen, self.lines = seen, lines

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = gzip.decompress(self.rfile.read(int(self.headers["Content-Length"])))
                if self.headers["Content-Type"].startswith(MEDIA_TYPE):
                    seen.append("arrow")
                    status = 400
                    msg = json.dumps({
                        "type": "https://gpuhealth.dev/problems/arrow-payload-refused",
                        "error": "Arrow payload refused, nothing written: schema metadata "
                                 "'gpuhealth.format' must be '4', got b'3'"}).encode()
                else:
                    seen.append("lines")
                    lines.append(body.decode())
                    status, msg = 204, b""
                self.send_response(status)
                self.send_header("X-Gpuhealth-Payload", "arrow")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), H)
        super().__init__(target=self.server.serve_forever, daemon=True)


def test_a_refused_arrow_segment_is_sent_as_line_protocol_at_once() -> None:
    """An Arrow refusal, even one naming the format, sends that segment as line protocol
    (every line of it: nothing lost); the next segment is offered as Arrow again."""
    svc = _RefusingService()
    svc.start()
    try:
        p = Pusher(f"http://127.0.0.1:{svc.server.server_address[1]}/write")
        segment = gzip.compress(LINES.encode())
        for n in (1, 2):
            res = p.push(segment)
            assert (res.outcome, res.status) == (Outcome.SENT, 204)
            assert (p.sent_arrow, p.sent_lines) == (0, n)
        assert svc.seen == ["arrow", "lines", "arrow", "lines"]
        assert svc.lines == [LINES, LINES]
    finally:
        svc.server.shutdown()
