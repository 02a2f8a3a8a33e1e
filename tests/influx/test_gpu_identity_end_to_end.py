"""A GPU's identity end to end (issue 33): a Telegraf flush carrying nvidia_smi's uuid, serial,
VBIOS and driver and a dcgm-exporter scrape's UUID, modelName and pci_bus_id, written to the
real endpoint, leaves the board in the API, in the page a real webhook receiver gets for a
double-bit ECC error, in /metrics as gpuhealth_gpu_info and in a real InfluxDB as `gpu_info`,
once per change. A later swap (another serial) closes the old board's row and the alert keeps
naming the board that failed."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.api.app import create_app
from service.api.state import Running
from service.settings import Settings
from tests.collectors.own_captures import TELEGRAF_NEXT_FLUSH, read
from tests.influx.server import InfluxServer
from tests.notify.receivers.servers import HttpRecorder
from tests.support.fleet import STEP, T0, ManualClock

_db = itertools.count()
GPU0 = "gpu-node-3:gpu0"
BOARD = {"uuid": "GPU-5b1e7c2a-93d4-4f0e-a1b2-0c3d4e5f6a70", "serial": "1654922031230",
         "pci_bus_id": "00000000:12:00.0", "model": "NVIDIA H100 80GB HBM3",
         "vbios": "96.00.89.00.01", "driver": "550.90.07"}


def flush(t: float) -> str:
    ns = str(round(t * 1e9))
    return "".join(line.rsplit(" ", 1)[0] + " " + ns + "\n"
                   for line in read(TELEGRAF_NEXT_FLUSH).splitlines())


def dbe(t: float) -> str:
    """A double-bit ECC error on gpu0, in our schema."""
    return f"gpu,host=gpu-node-3,gpu=0 ecc_dbe_volatile=1i {round(t * 1e9)}\n"


@pytest.fixture
def hook() -> Iterator[HttpRecorder]:
    with HttpRecorder() as srv:
        yield srv


@pytest.fixture
def app(influx_server: InfluxServer, hook: HttpRecorder, tmp_path: Path
        ) -> Iterator[tuple[TestClient, ManualClock, str]]:
    db = f"ident{next(_db)}"
    settings = Settings(
        storage={"data_dir": tmp_path / "data",  # type: ignore[arg-type]
                 "influxdb": {"url": influx_server.url, "database": db,
                              "raw_retention": "INF"}},
        notify={"receivers": [{"name": "pager", "type": "webhook",
                               "config": {"url": f"{hook.url}/hook"}}],
                "route": {"receiver": "pager", "group_wait_s": 0, "group_interval_s": 0.5}})
    clock = ManualClock(T0 + 1)
    with TestClient(create_app(settings, clock=clock, schedule=False)) as c:
        yield c, clock, db


def _running(client: TestClient) -> Running:
    st: Running = client.app.state.gpuhealth  # type: ignore[attr-defined]
    return st


def _write(client: TestClient, body: str) -> None:
    r = client.post("/write", params={"db": "telegraf"}, content=body)
    assert r.status_code == 204, r.text


def _info(client: TestClient) -> list[dict[str, str]]:
    return [dict(s.labels) for f in text_string_to_metric_families(client.get("/metrics").text)
            for s in f.samples if s.name == "gpuhealth_gpu_info"]


def _influx_boards(srv: InfluxServer, db: str) -> list[dict[str, Any]]:
    got = srv.query('SELECT * FROM "gpu_info"', db)
    return [dict(zip(r["columns"], v, strict=True))  # type: ignore[call-overload]
            for r in got for v in r["values"]]  # type: ignore[attr-defined]


def _pages(hook: HttpRecorder, status: str) -> list[dict[str, Any]]:
    return [a for r in hook.requests if r.path == "/hook" for a in r.json()["alerts"]
            if a["status"] == status]


def test_a_telegraf_flush_leaves_the_board_everywhere(
        app: tuple[TestClient, ManualClock, str], hook: HttpRecorder,
        influx_server: InfluxServer) -> None:
    client, clock, db = app
    st = _running(client)
    for k in range(3):  # the same identity every round: stored once
        clock.now = T0 + k * STEP + 1
        _write(client, flush(T0 + k * STEP))
        st.scheduler.score_once()
    # The API: nvidia_smi's serial, VBIOS and driver and dcgm-exporter's bus id, one board.
    ident = client.get(f"/v1/gpus/{GPU0}").json()["identity"]
    assert {k: ident[k] for k in BOARD} == BOARD
    assert ident["previous"] == [] and ident["why"] == "new"
    node = client.get("/v1/nodes/gpu-node-3").json()
    assert [g["identity"]["serial"] for g in node["gpus"]] == ["1654922031230", "1654922031231"]
    # /metrics: dcgm-exporter's label names beside ours.
    [info] = [i for i in _info(client) if i["gpu"] == "0"]
    assert info == {"node": "gpu-node-3", "gpu": "0", "UUID": BOARD["uuid"],
                    "modelName": BOARD["model"], "pci_bus_id": BOARD["pci_bus_id"],
                    "serial": BOARD["serial"], "vbios": BOARD["vbios"],
                    "driver": BOARD["driver"]}
    # A critical alert's page names the board: labels and a one-line annotation.
    clock.now = T0 + 3 * STEP + 1
    _write(client, dbe(T0 + 3 * STEP))
    st.scheduler.score_once()
    note = st.pipeline.notification
    assert note is not None and note.sender.wait(30)
    [page] = [a for a in _pages(hook, "firing") if a["labels"]["entity"] == GPU0]
    assert page["labels"]["UUID"] == BOARD["uuid"]
    assert page["labels"]["serial"] == BOARD["serial"]
    assert page["labels"]["modelName"] == BOARD["model"]
    assert page["annotations"]["board"] == (
        "NVIDIA H100 80GB HBM3 serial 1654922031230, UUID GPU-5b1e7c2a-93d4-4f0e-a1b2-"
        "0c3d4e5f6a70, bus 00000000:12:00.0, VBIOS 96.00.89.00.01, driver 550.90.07")
    alert = next(a for a in client.get("/v1/alerts", params={"state": "firing"}).json()["alerts"]
                 if a["entity"] == GPU0)
    assert alert["labels"]["serial"] == BOARD["serial"]
    # InfluxDB: one gpu_info point per GPU, not one per round.
    sink = next(s for s in st.pipeline.sinks if type(s).__name__ == "InfluxSink")
    assert sink.flush(30)  # type: ignore[attr-defined]
    rows = _influx_boards(influx_server, db)
    assert sorted((r["gpu"], r["serial"], r["uuid"]) for r in rows) == [
        ("0", "1654922031230", BOARD["uuid"]),
        ("1", "1654922031231", "GPU-5b1e7c2a-93d4-4f0e-a1b2-0c3d4e5f6a71")]
    assert {r["host"] for r in rows} == {"gpu-node-3"}

    # The board is swapped: another serial and UUID in the slot. The slot's row is closed, the
    # old alert keeps naming the board that failed, InfluxDB gets the new board once.
    swapped = flush(T0 + 10 * STEP).replace("1654922031230", "1654922099999").replace(
        "4e5f6a70", "4e5f6a7f")
    clock.now = T0 + 10 * STEP + 1
    _write(client, swapped)
    st.scheduler.score_once()
    ident = client.get(f"/v1/gpus/{GPU0}").json()["identity"]
    assert ident["serial"] == "1654922099999"
    assert ident["why"] == "swapped (serial 1654922031230 -> 1654922099999)"
    assert [(b["serial"], b["until"] is not None) for b in ident["previous"]] == [
        ("1654922031230", True)]
    again = client.get(f"/v1/alerts/{alert['id']}").json()
    assert again["labels"]["serial"] == BOARD["serial"]
    # The old board's failure is repaired by the swap (the learning loop's label).
    repairs = client.get("/v1/labels", params={"kind": "repair", "entity": GPU0}).json()
    assert [(lb["action"], lb["source"]) for lb in repairs["labels"]] == [
        ("gpu_swapped", "identity")]
    assert sink.flush(30)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_influx_boards(influx_server, db)) < 3:
        time.sleep(0.1)
    assert sorted(r["serial"] for r in _influx_boards(influx_server, db)) == [
        "1654922031230", "1654922031231", "1654922099999"]
