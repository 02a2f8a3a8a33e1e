"""Write tokens and the InfluxDB v2 write path, as Telegraf's influxdb and influxdb_v2 outputs
send them, through the real app (lifespan included)."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.api.app import create_app
from service.api.timefmt import rfc3339
from service.settings import IngestSettings, Settings
from tests.support.fleet import T0, ManualClock

NS = int(T0 * 1e9)
BODY = f"gpu,host=n001,gpu=0 gpu_temp=61.5 {NS}\n"
TELEGRAF = (f"nvidia_smi,host=n001,index=0,name=NVIDIA\\ H100\\ 80GB\\ HBM3,pstate=P0,"
            f"uuid=GPU-0 temperature_gpu=64i,power_draw=412.3,utilization_gpu=97i {NS}\n")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    ingest = IngestSettings(tokens=[SecretStr("s3cret"), SecretStr("other")])
    app = create_app(settings.model_copy(update={"ingest": ingest}), clock=ManualClock(T0 + 1),
                     schedule=False)
    with TestClient(app) as c:
        yield c


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.slow
@pytest.mark.parametrize("headers,params", [
    ({"Authorization": "Token s3cret"}, {}),
    ({"Authorization": "Bearer other"}, {}),
    ({"Authorization": _basic("telegraf", "s3cret")}, {}),
    ({}, {"u": "telegraf", "p": "s3cret"}),
])
def test_each_way_of_sending_a_token_is_accepted(client: TestClient, headers: dict[str, str],
                                                 params: dict[str, str]) -> None:
    r = client.post("/write", content=BODY, headers=headers, params=params)
    assert r.status_code == 204, r.text


@pytest.mark.slow
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Token wrong"},
                                     {"Authorization": "Basic !!notbase64"}])
def test_missing_or_wrong_tokens_are_refused_and_nothing_is_kept(
        client: TestClient, headers: dict[str, str]) -> None:
    r = client.post("/v1/write", content=BODY, headers=headers)
    assert r.status_code == 401
    assert "token" in r.json()["error"].lower() or "authorization" in r.json()["error"].lower()
    assert r.headers["www-authenticate"].startswith("Token")
    assert client.get("/v1/gpus/n001:gpu0").status_code == 404


def test_influxdb_v2_path_takes_telegraf_output_gzipped(client: TestClient) -> None:
    r = client.post("/api/v2/write", params={"org": "ops", "bucket": "gpus", "precision": "ns",
                                             "strict": "false"},
                    content=gzip.compress(TELEGRAF.encode()),
                    headers={"Authorization": "Token s3cret", "Content-Encoding": "gzip"})
    assert r.status_code == 204, r.text
    metrics = {m["name"]: m["value"] for m in client.get("/v1/gpus/n001:gpu0").json()["metrics"]}
    assert metrics["gpu_temp"] == 64 and metrics["power_draw"] == pytest.approx(412.3)


def test_v2_precision_in_seconds(client: TestClient) -> None:
    body = f"gpu,host=n002,gpu=1 gpu_temp=50 {int(T0)}\n"
    r = client.post("/api/v2/write", params={"precision": "s"}, content=body,
                    headers={"Authorization": "Token s3cret"})
    assert r.status_code == 204, r.text
    temp = next(m for m in client.get("/v1/gpus/n002:gpu1").json()["metrics"]
                if m["name"] == "gpu_temp")
    assert temp["ts"] == rfc3339(T0)
