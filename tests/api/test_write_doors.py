"""Both write doors share one answer (service.api.write_answer): the FastAPI route, reached on a
service without the lean route or with a query spelling only FastAPI reads (`strict=0`), answers
Arrow bodies, partial writes, pending entities and failures inside the answer exactly as the
lean route does: the same status, headers and body, and the same metrics."""

from __future__ import annotations

import gzip
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors.agent.push import Outcome, Pusher
from collectors.arrow_batch import MEDIA_TYPE, encode
from collectors.schema import SchemaMapper
from service.api import write
from service.api.app import create_app
from service.settings import IngestSettings, Settings
from tests.support.fleet import T0

NS = int(T0 * 1e9)
LATER = NS + 5_000_000_000
LIMIT = 64 * 1024
GZ = {"Content-Encoding": "gzip"}
ARROW = {"Content-Type": MEDIA_TYPE}


def _lines(node: str, gpus: int = 4, ts: int = NS) -> str:
    return "".join(f"gpu,host={node},gpu={g} gpu_temp={40 + g}.5,ecc_sbe_volatile={g}i {ts}\n"
                   for g in range(gpus))


def _arrow(text: str) -> bytes:
    return encode(SchemaMapper().parse(text))


def _bad(node: str) -> str:
    """A later round of `node` with a counter gone back and a temperature out of range: the
    ingest stage refuses those by entity and keeps the rest."""
    return _lines(node, ts=LATER).replace("ecc_sbe_volatile=2i", "ecc_sbe_volatile=1i").replace(
        "gpu=3 gpu_temp=43.5", "gpu=3 gpu_temp=1e300")


# Sent in this order to each door, each to a service of its own (anonymous writes: at most 4
# new GPUs per request). Name -> (headers, body).
_CASES: list[tuple[str, dict[str, str], bytes]] = [
    ("lines", GZ, gzip.compress(_lines("n001").encode())),
    ("arrow", {**ARROW, **GZ}, gzip.compress(_arrow(_lines("n002")))),
    ("arrow plain", ARROW, _arrow(_lines("n003"))),
    ("arrow partial", ARROW, _arrow(_bad("n002"))),
    ("partial write", {}, (_bad("n001") + "not line protocol\n").encode()),
    ("pending", {}, "".join(_lines(f"n1{i}") for i in range(3)).encode()),
    ("pending again", {}, "".join(_lines(f"n1{i}") for i in range(3)).encode()),
    ("arrow pending", ARROW, _arrow("".join(_lines(f"n2{i}") for i in range(3)))),
    ("arrow malformed", ARROW, _arrow(_lines("n004"))[:-30]),
    ("arrow cut gzip", {**ARROW, **GZ}, gzip.compress(_arrow(_lines("n005")))[:-12]),
    ("gzip cut", GZ, gzip.compress(_lines("n006").encode())[:-12]),
    ("gzip over the limit", GZ, gzip.compress(b"#" * (LIMIT * 4))),
    ("not gzip", GZ, b"plain text"),
    ("empty", {}, b""),
]


def _app(tmp: Path, lean: bool, coalesce_ms: float) -> Any:
    settings = Settings(storage={"data_dir": tmp},  # type: ignore[arg-type]
                        ingest=IngestSettings(max_body_bytes=LIMIT, max_new_gpus_per_batch=4,
                                              coalesce_ms=coalesce_ms))
    return create_app(settings, clock=lambda: T0 + 1, schedule=False, lean_write=lean)


def _seen(r: Any) -> tuple[Any, ...]:
    return (r.status_code, r.headers.get("content-type"), r.headers.get("x-gpuhealth-payload"),
            r.headers.get("retry-after"), r.json() if r.content else None)


def _metrics(c: TestClient) -> list[str]:
    return sorted(ln for ln in c.get("/metrics").text.splitlines()
                  if ln.startswith(("gpuhealth_write_requests_total",
                                    'gpuhealth_ingest_seconds_count{source="write"}')))


@pytest.fixture
def route_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Requests that reached the FastAPI door (its token check)."""
    calls: list[str] = []
    checked = write.authorize

    def spy(*args: Any, **kwargs: Any) -> None:
        calls.append("route")
        checked(*args, **kwargs)

    monkeypatch.setattr(write, "authorize", spy)
    return calls


@pytest.mark.parametrize("coalesce_ms", [50.0, 0.0])
def test_the_fastapi_door_answers_as_the_lean_door(
        tmp_path: Path, route_calls: list[str], coalesce_ms: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # door -> (lean route installed, query): `strict=0` is read by FastAPI only.
    doors = {"lean": (True, ""), "fastapi": (False, ""), "strict=0": (True, "?strict=0")}
    seen: dict[str, list[tuple[Any, ...]]] = {}
    metrics: dict[str, list[str]] = {}
    for door, (lean, query) in doors.items():
        route_calls.clear()
        with TestClient(_app(tmp_path / door, lean, coalesce_ms)) as c:
            seen[door] = [_seen(c.post("/write" + query, content=body, headers=headers))
                          for _, headers, body in _CASES]
            # A failure inside the answer (here the ingest) is the same 500 on either door.
            pipeline = c.app.state.gpuhealth.pipeline  # type: ignore[attr-defined]

            def broken(*args: Any, **kwargs: Any) -> None:
                raise RuntimeError("ingest broke")

            monkeypatch.setattr(pipeline, "ingest", broken)
            for headers, body in (({}, _lines("n007").encode()), (ARROW, _arrow(_lines("n008")))):
                seen[door].append(_seen(c.post("/write" + query, content=body, headers=headers)))
            metrics[door] = _metrics(c)
        reached = len(route_calls)
        assert reached == (0 if door == "lean" else len(_CASES) + 2), door
    names = [name for name, *_ in _CASES] + ["failure", "arrow failure"]
    for door in ("fastapi", "strict=0"):
        for name, lean_saw, door_saw in zip(names, seen["lean"], seen[door], strict=True):
            assert door_saw == lean_saw, (door, name)
        assert metrics[door] == metrics["lean"], door
    got = dict(zip(names, seen["lean"], strict=True))
    assert [got[n][0] for n in names] == [204, 204, 204, 400, 400, 503, 503, 503, 400, 400,
                                          400, 413, 400, 204, 500, 500]
    # every answer to an Arrow body read whole says it was read as Arrow, and no other does
    kinds = [headers.get("Content-Type") for _, headers, _ in _CASES] + [None, MEDIA_TYPE]
    assert [ans[2] for ans in seen["lean"]] == ["arrow" if k else None for k in kinds]
    partial = got["partial write"][4]
    assert partial["type"] == "/problems/partial-write" and partial["accepted"] > 0
    assert got["arrow partial"][4]["type"] == "/problems/partial-write"
    pending = got["pending"][4]
    assert pending["type"] == "/problems/entities-pending" and got["pending"][3] == "1"
    assert pending["pending_nodes"] and pending["accepted"] > 0
    assert got["arrow malformed"][4]["type"] == "/problems/arrow-payload-refused"
    assert got["arrow malformed"][4]["accepted"] == 0
    assert got["gzip cut"][4]["truncated"] is True
    assert got["failure"][4]["error"] == "the service failed to answer this request"
    assert any('code="503"} 3.0' in ln for ln in metrics["lean"]), metrics["lean"]


class _OlderService(threading.Thread):
    """A target that answers an Arrow body 415 (as a service without pyarrow does, and the
    FastAPI route did before it read Arrow) and takes line protocol."""

    def __init__(self) -> None:
        seen: list[str] = []
        self.seen = seen

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                kind = self.headers["Content-Type"]
                seen.append(kind)
                refused = kind.startswith(MEDIA_TYPE)
                msg = json.dumps({"error": "send line protocol"}).encode() if refused else b""
                self.send_response(415 if refused else 204)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), H)
        super().__init__(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def older() -> Iterator[_OlderService]:
    svc = _OlderService()
    svc.start()
    try:
        yield svc
    finally:
        svc.server.shutdown()


def test_the_agent_falls_back_on_a_415(older: _OlderService) -> None:
    p = Pusher(f"http://127.0.0.1:{older.server.server_address[1]}/write")
    segment = gzip.compress(_lines("n001").encode())
    res = p.push(segment)  # 415, then the same segment as line protocol
    assert (res.outcome, res.status) == (Outcome.SENT, 204)
    assert (p.sent_arrow, p.sent_lines) == (0, 1)
    assert p.push(segment).status == 204 and p.sent_lines == 2  # remembered: no Arrow try
    assert older.seen == [MEDIA_TYPE, "text/plain; charset=utf-8", "text/plain; charset=utf-8"]


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("coalesce_ms", [0.0, 50.0])
def test_without_pyarrow_every_door_answers_arrow_415(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lean: bool, coalesce_ms: float) -> None:
    # An install without pyarrow: the agent falls back to line protocol on a 415 only (it
    # retries a 500), so no door may fail any other way, inline or in a worker thread.
    body = _arrow(_lines("n001"))
    monkeypatch.setitem(sys.modules, "collectors.arrow_batch", None)  # import raises
    with TestClient(_app(tmp_path, lean, coalesce_ms)) as c:
        r = c.post("/v1/write", content=body, headers=ARROW)
        assert r.status_code == 415, r.text
        assert "pyarrow is not installed" in r.json()["error"]
        assert c.post("/v1/write", content=_lines("n001")).status_code == 204
