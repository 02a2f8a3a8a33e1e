"""Booleans are type errors on numbers (issue 29, defect 9): `ecc_dbe_volatile=true` was read as
one double-bit error and drained nodes in auto mode. Through the real app's /write, in every
shape a sender writes (our line protocol, Telegraf nvidia_smi words, Telegraf prometheus
scraping dcgm-exporter): the value is refused and named in the partial-write answer, the line's
other fields are kept, and flags (the catalog's `bool` states) still take true and false."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors.catalog import CATALOG
from collectors.schema import SchemaMapper
from service.api.app import create_app
from service.settings import Settings
from tests.support.fleet import T0, ManualClock

NS = int(T0) * 10**9


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=ManualClock(T0 + 1), schedule=False)) as c:
        yield c


def _metric(client: TestClient, gpu: str, name: str) -> Any:
    r = client.get(f"/v1/gpus/{gpu}")
    assert r.status_code == 200, r.text
    return {m["name"]: m["value"] for m in r.json()["metrics"]}[name]


def test_a_boolean_on_a_counter_is_refused_and_the_line_kept(client: TestClient) -> None:
    r = client.post("/write", content=f"gpu,host=n001,gpu=0 ecc_dbe_volatile=true,gpu_temp=41,"
                                      f"ecc_sbe_volatile=T {NS}")
    assert r.status_code == 400, r.text
    body = r.json()
    assert "2 refused" in body["error"] and "1 samples kept" in body["error"]
    reasons = {rj["metric"]: rj["reason"] for rj in body["rejections"]}
    assert "boolean" in reasons["ecc_dbe_volatile"] and "counter" in reasons["ecc_dbe_volatile"]
    assert "boolean" in reasons["ecc_sbe_volatile"]
    assert _metric(client, "n001:gpu0", "gpu_temp") == 41.0
    assert _metric(client, "n001:gpu0", "ecc_dbe_volatile") is None  # not one DBE


def test_a_boolean_on_a_gauge_or_an_enumerated_state_is_refused(client: TestClient) -> None:
    r = client.post("/write", content=(
        f"gpu,host=n001,gpu=1 gpu_temp=false,power_draw=300 {NS}\n"
        # An IB port's state is an enum where 1 is DOWN: neither `true` nor "ACTIVE" is 1.
        f"ib_port,host=n001,device=mlx5_0,port=1 ib_state=true,ib_symbol_error=0i {NS}\n"
        f'ib_port,host=n001,device=mlx5_0,port=2 ib_state="ACTIVE",ib_symbol_error=0i {NS}'))
    assert r.status_code == 400, r.text
    refused = {(rj["line"], rj["metric"]) for rj in r.json()["rejections"]}
    assert refused == {(1, "gpu_temp"), (2, "ib_state"), (3, "ib_state")}
    assert _metric(client, "n001:gpu1", "power_draw") == 300.0


def test_flags_still_take_booleans_and_words(client: TestClient) -> None:
    flags = [m.name for m in CATALOG.columns(CATALOG["gpu_temp"].scope) if m.takes_bool]
    assert "remapped_rows_pending" in flags and "ecc_dbe_volatile" not in flags
    r = client.post("/write", content=(
        f"gpu,host=n001,gpu=2 remapped_rows_pending=true,retired_pages_pending=F {NS}\n"
        f'nvidia_smi,host=n001,index=3 remapped_rows_pending="Yes",temperature_gpu=40i {NS}'))
    assert r.status_code == 204, r.text
    assert _metric(client, "n001:gpu2", "remapped_rows_pending") == 1.0
    assert _metric(client, "n001:gpu2", "retired_pages_pending") == 0.0
    assert _metric(client, "n001:gpu3", "remapped_rows_pending") == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("line", [
    # metric_version 2: one `prometheus` measurement, the DCGM fields as its fields
    "prometheus,Hostname=n001,gpu=4 DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=true,DCGM_FI_DEV_GPU_TEMP=41",
    # metric_version 1: a measurement per metric, the value in a field named by its type
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,Hostname=n001,gpu=4 counter=true",
])
def test_telegraf_prometheus_booleans_are_refused(client: TestClient, line: str) -> None:
    r = client.post("/write", content=f"{line} {NS}")
    assert r.status_code == 400, r.text
    (rj,) = r.json()["rejections"]
    assert rj["metric"] == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" and "boolean" in rj["reason"]
    if "GPU_TEMP" in line:
        assert _metric(client, "n001:gpu4", "gpu_temp") == 41.0
    else:
        assert client.get("/v1/gpus/n001:gpu4").status_code == 404


def test_the_mapper_refuses_booleans_on_every_path() -> None:
    """The point path and the fast path a known layout takes give the same answer."""
    m = SchemaMapper()
    good = f"gpu,host=n9,gpu=0 ecc_dbe_volatile=0i {NS}"
    assert not m.parse(good).rejected
    batch = m.parse(f"{good}\ngpu,host=n9,gpu=0 ecc_dbe_volatile=true {NS + 10**9}")
    assert [r.line for r in batch.rejected] == [2]
    assert m.fast_lines >= 1  # the good line took the fast path, the boolean did not
