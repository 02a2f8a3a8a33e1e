"""POST /write and /v1/write: line protocol in, samples visible through the read API."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.timefmt import rfc3339
from service.settings import IngestSettings, Settings
from tests.support.fleet import T0, ManualClock

NS = int(T0 * 1e9)
LIMIT = 4096


def _line(gpu: int, temp: float, ts_ns: int = NS, node: str = "n001") -> str:
    return f"gpu,host={node},gpu={gpu} gpu_temp={temp},ecc_sbe_volatile=3i {ts_ns}"


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    settings = settings.model_copy(update={"ingest": IngestSettings(max_body_bytes=LIMIT)})
    with TestClient(create_app(settings, clock=ManualClock(T0 + 1), schedule=False)) as c:
        yield c


def _metric(client: TestClient, gpu: str, name: str) -> Any:
    r = client.get(f"/v1/gpus/{gpu}")
    assert r.status_code == 200, r.text
    return next(m for m in r.json()["metrics"] if m["name"] == name)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/write", "/v1/write"])
def test_good_lines_are_accepted(client: TestClient, path: str) -> None:
    body = "\n".join([_line(0, 61.5), _line(1, 62.5),
                      f"xid,host=n001,gpu=1 code=79i {NS}", ""])
    r = client.post(path, content=body)
    assert r.status_code == 204, r.text
    assert _metric(client, "n001:gpu0", "gpu_temp")["value"] == 61.5
    assert _metric(client, "n001:gpu1", "ecc_sbe_volatile")["value"] == 3
    assert _metric(client, "n001:gpu1", "xid") == {"name": "xid", "unit": "code",
                                                    "kind": "event", "value": 79.0,
                                                    "ts": rfc3339(T0)}


def test_bad_lines_are_listed_and_good_ones_kept(client: TestClient) -> None:
    body = "\n".join([
        _line(0, 61.5),
        "gpu,host=n001,gpu=1 gpu_temp=",  # no value
        "cpu,host=n001 usage_idle=99 1",  # not a measurement we track
        _line(2, 63.5),
        "gpu,host=n001,gpu=x gpu_temp=50 1",  # GPU index is not a number
        "# a comment is fine",
        "gpu,host=n001,gpu=3 gpu_temp=70,power_draw=\"high\" " + str(NS),  # one bad field
    ])
    r = client.post("/write?db=telegraf", content=body)
    assert r.status_code == 400
    err = r.json()
    assert err["error"].startswith("partial write")
    # `cpu` is ignored, as InfluxDB would store it and we have no use for it.
    assert [x["line"] for x in err["rejections"]] == [2, 5, 7]
    assert err["rejections"][2]["metric"] == "power_draw"
    assert err["rejected"] == 3 and err["accepted"] == 5
    assert err["error"].endswith("dropped=3") and "line 5: tag 'gpu'" in err["error"]
    assert _metric(client, "n001:gpu0", "gpu_temp")["value"] == 61.5
    assert _metric(client, "n001:gpu2", "gpu_temp")["value"] == 63.5
    assert _metric(client, "n001:gpu3", "gpu_temp")["value"] == 70.0  # the line's good field
    assert _metric(client, "n001:gpu3", "power_draw")["value"] is None
    assert client.get("/v1/gpus/n001:gpu1").status_code == 404


def test_ingest_rejections_are_listed_too(client: TestClient) -> None:
    future = NS + 3600 * 10**9  # an hour ahead of the service clock
    r = client.post("/write", content=_line(0, 50.0) + "\n" + _line(1, 50.0, future))
    assert r.status_code == 400
    [rej] = r.json()["rejections"]
    assert rej["line"] is None and rej["entity"] == "n001:gpu1" and "future" in rej["reason"]


def test_strict_writes_refuse_what_the_catalog_does_not_track(client: TestClient) -> None:
    body = _line(0, 55.0) + "\ncpu,host=n001 usage_idle=99 " + str(NS)
    assert client.post("/write", content=body).status_code == 204
    r = client.post("/write?strict=true", content=body)
    assert r.status_code == 400
    [rej] = r.json()["rejections"]
    assert rej["line"] == 2 and "unknown measurement 'cpu'" in rej["reason"]


def test_gzip_body(client: TestClient) -> None:
    body = gzip.compress((_line(4, 58.0) + "\n").encode())
    r = client.post("/write", content=body, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 204, r.text
    assert _metric(client, "n001:gpu4", "gpu_temp")["value"] == 58.0


def test_precision_and_default_timestamp(client: TestClient) -> None:
    r = client.post("/write?precision=s", content=f"gpu,host=n002,gpu=0 gpu_temp=40 {int(T0)}")
    assert r.status_code == 204, r.text
    assert _metric(client, "n002:gpu0", "gpu_temp")["ts"] == rfc3339(T0)
    assert client.post("/write", content="gpu,host=n002,gpu=1 gpu_temp=41").status_code == 204
    assert _metric(client, "n002:gpu1", "gpu_temp")["ts"] == rfc3339(T0 + 1)  # the service's clock
    assert client.post("/write?precision=fortnight", content="").status_code == 422


def test_oversized_bodies_are_413(client: TestClient) -> None:
    lines = "\n".join(_line(g % 8, 50.0, NS + g) for g in range(200))
    assert len(lines) > LIMIT
    r = client.post("/write", content=lines)
    assert r.status_code == 413 and str(LIMIT) in r.json()["error"]
    # Small on the wire, too large once inflated.
    r = client.post("/write", content=gzip.compress(lines.encode()),
                    headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413 and "decompressed" in r.json()["error"]
    # Without a Content-Length the body is counted as it streams in.
    r = client.post("/write", content=iter([lines[:3000].encode(), lines[3000:].encode()]))
    assert r.status_code == 413
    assert client.get("/v1/nodes").json()["total"] == 0  # nothing of it was ingested


def test_bad_encodings(client: TestClient) -> None:
    r = client.post("/write", content=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert r.status_code == 400 and "gzip" in r.json()["error"]
    r = client.post("/write", content=gzip.compress(b"x" * 100)[:20],
                    headers={"Content-Encoding": "gzip"})
    assert r.status_code == 400 and "truncated" in r.json()["error"]
    r = client.post("/write", content=b"", headers={"Content-Encoding": "br"})
    assert r.status_code == 415


def test_write_requests_are_counted(client: TestClient) -> None:
    client.post("/write", content=_line(0, 50.0))
    client.post("/write", content="bad")
    text = client.get("/metrics").text
    assert 'gpuhealth_write_requests_total{code="204"} 1.0' in text
    assert 'gpuhealth_write_requests_total{code="400"} 1.0' in text
    assert 'gpuhealth_ingest_seconds_count{source="write"} 2.0' in text


def test_a_known_layout_takes_the_fast_path_and_still_names_bad_lines(
        client: TestClient) -> None:
    def body(ts_ns: int, bad: str = "3i") -> str:
        return "\n".join(f"gpu,host=n003,gpu={g} gpu_temp={50 + g},ecc_sbe_volatile="
                         f"{bad if g == 2 else '3i'} {ts_ns}" for g in range(4))
    assert client.post("/write", content=body(NS - 5 * 10**9)).status_code == 204
    mapper = client.app.state.gpuhealth.mappers[False]  # type: ignore[attr-defined]
    before = mapper.fast_lines
    r = client.post("/write", content=body(NS, bad="-3i"))
    assert r.status_code == 400
    [rej] = r.json()["rejections"]
    assert rej["line"] == 3 and "counter ecc_sbe_volatile is negative" in rej["reason"]
    assert mapper.fast_lines - before == 3  # the good lines; the bad one took the slow path
    assert _metric(client, "n003:gpu1", "gpu_temp")["value"] == 51.0
    assert _metric(client, "n003:gpu2", "gpu_temp")["value"] == 52.0  # its good field kept
