"""The lean write route (service.api.write_lean) answers exactly as the FastAPI route: the same
requests, over real HTTP on loopback, to a service with it and one without it."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from service.api import write
from service.api.app import create_app
from service.settings import IngestSettings, Settings
from tests.support.fleet import T0

NS = int(T0 * 1e9)
TOKEN = "lean-token-1"
LIMIT = 8192
AUTH = {"Authorization": f"Token {TOKEN}"}


def _settings(data_dir: Path) -> Settings:
    return Settings(storage={"data_dir": data_dir},  # type: ignore[arg-type]
                    ingest=IngestSettings(max_body_bytes=LIMIT, tokens=[TOKEN]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def services(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Base URLs of the two services: "fastapi" (lean_write=False) and "lean"."""
    urls: dict[str, str] = {}
    servers = []
    for name, lean in (("fastapi", False), ("lean", True)):
        app = create_app(_settings(tmp_path / name), clock=lambda: T0 + 1, schedule=False,
                         lean_write=lean)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        urls[name] = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not all(s.started for s, _ in servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(s.started for s, _ in servers)
    try:
        yield urls
    finally:
        for server, thread in servers:
            server.should_exit = True
            thread.join(timeout=20)


def _lines(node: str = "n001", *, gpus: int = 4, ts: int = NS) -> list[str]:
    return [f"gpu,host={node},gpu={g} gpu_temp={40 + g}.5,ecc_sbe_volatile={g}i {ts}"
            for g in range(gpus)]


def _answer(r: httpx.Response) -> tuple[int, str | None, str | None, Any]:
    body = r.json() if r.content else None
    return (r.status_code, r.headers.get("content-type"), r.headers.get("www-authenticate"),
            body)


_LEARNED = "\n".join(_lines()) + "\n"
_LONG = "1" * 65
_CASES: list[tuple[str, str, dict[str, str], bytes | None]] = [
    ("good plain", "/write", AUTH, _LEARNED.encode()),
    ("good gzip", "/write", {**AUTH, "Content-Encoding": "gzip"},
     gzip.compress(_LEARNED.encode())),
    ("v2 with p", "/api/v2/write?org=o&bucket=b&u=x&p=" + TOKEN, {},
     b"\n".join(ln.encode() for ln in _lines("n002"))),
    # Bad lines among good ones, including lines the fast path has learned the layout of (an
    # over-long number, a negative counter): each named, every good sample kept.
    ("partial write", "/v1/write", AUTH, "\n".join([
        *_lines(ts=NS + 5_000_000_000), "not line protocol",
        f"gpu,host=n001,gpu=1 gpu_temp={_LONG},ecc_sbe_volatile=1i {NS + 5_000_000_000}",
        f"gpu,host=n001,gpu=2 gpu_temp=40.5,ecc_sbe_volatile=-3i {NS + 5_000_000_000}",
        "gpu,host=n001,gpu=3 gpu_temp=1e308 " + str(NS + 5_000_000_000)]).encode()),
    ("strict unknown", "/write?strict=true", AUTH, b"weather,host=n1 t=1 " + str(NS).encode()),
    ("no token", "/write", {}, _LEARNED.encode()),
    ("wrong token", "/write", {"Authorization": "Token nope"}, _LEARNED.encode()),
    ("bad basic", "/write", {"Authorization": "Basic %%%"}, _LEARNED.encode()),
    ("bad precision", "/write?precision=fortnight", AUTH, _LEARNED.encode()),
    ("strict spelled 1", "/write?strict=1", AUTH, _LEARNED.encode()),
    ("precision twice", "/write?precision=s&precision=ms", AUTH, _LEARNED.encode()),
    ("brotli", "/write", {**AUTH, "Content-Encoding": "br"}, _LEARNED.encode()),
    ("not gzip", "/write", {**AUTH, "Content-Encoding": "gzip"}, b"plain text"),
    ("truncated gzip", "/write", {**AUTH, "Content-Encoding": "gzip"},
     gzip.compress(_LEARNED.encode())[:-12]),
    ("over the limit", "/write", AUTH, b"x" * (LIMIT + 1)),
    ("gzip over the limit", "/write", {**AUTH, "Content-Encoding": "gzip"},
     gzip.compress(b"#" * (LIMIT * 4))),
    ("empty", "/write", AUTH, b""),
]


def test_the_lean_route_answers_as_the_fastapi_route(services: dict[str, str]) -> None:
    seen: dict[str, list[Any]] = {}
    for name, base in services.items():
        with httpx.Client(base_url=base, timeout=30) as c:
            seen[name] = [_answer(c.post(path, content=body, headers=headers))
                          for _, path, headers, body in _CASES]
    for i, (case, *_) in enumerate(_CASES):
        assert seen["lean"][i] == seen["fastapi"][i], case
    by_case = {case: ans for (case, *_), ans in zip(_CASES, seen["lean"], strict=True)}
    assert by_case["good gzip"][0] == 204
    assert by_case["no token"][0] == 401 and by_case["no token"][2]
    assert by_case["bad precision"][0] == 422 and "error" in by_case["bad precision"][3]
    assert by_case["brotli"][0] == 415
    assert by_case["over the limit"][0] == 413
    assert by_case["truncated gzip"][3]["truncated"] is True
    partial = by_case["partial write"]
    assert partial[0] == 400 and partial[1] == "application/json"
    lines = [r["line"] for r in partial[3]["rejections"]]
    assert lines == [5, 6, 7, None]  # the range check is ingest's, by entity and metric
    assert partial[3]["rejections"][3]["entity"] == "n001:gpu3"
    # Every good sample was kept: 4 lines of 2 fields, less the out-of-range temperature that
    # overwrote gpu3's (the negative counter's line kept its good temperature).
    assert partial[3]["accepted"] == 7
    with httpx.Client(base_url=services["lean"], timeout=30) as c:
        gpu = c.get("/v1/gpus/n001:gpu0").json()
        temp = next(m for m in gpu["metrics"] if m["name"] == "gpu_temp")
        assert temp["value"] == pytest.approx(40.5)


def test_a_body_streamed_past_the_limit_is_refused_as_before(services: dict[str, str]) -> None:
    """Chunked, without a Content-Length: the lean route reads past the limit and hands what
    it read to the FastAPI route, which answers its 413."""
    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 1024 + 2):
            yield b"#" * 1024

    got = []
    for base in services.values():
        with httpx.Client(base_url=base, timeout=30) as c:
            got.append(_answer(c.post("/write", content=chunks(), headers=AUTH)))
    assert got[0] == got[1]
    assert got[0][0] == 413


def test_the_common_write_never_reaches_the_fastapi_route(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reached: list[str] = []
    checked = write.authorize

    def spy(*args: Any, **kwargs: Any) -> None:
        reached.append("route")
        checked(*args, **kwargs)

    monkeypatch.setattr(write, "authorize", spy)
    app = create_app(_settings(tmp_path), clock=lambda: T0 + 1, schedule=False)
    with TestClient(app) as c:
        assert c.post("/write", content=_LEARNED, headers=AUTH).status_code == 204
        assert not reached
        assert c.post("/write", content=_LEARNED).status_code == 401  # handed on
        assert reached == ["route"]
