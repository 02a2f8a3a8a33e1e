"""The history endpoints over the embedded SQLite store, through the app's lifespan and a real
Pipeline: metrics of a GPU, link and port over time, the 400s that say what to ask instead,
and hostile names that must find nothing and change nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame, name_problem
from service.api.app import create_app
from service.api.state import Running
from service.api.timefmt import rfc3339
from service.history.history import build_query
from service.history.history_sqlite import SQLiteHistory
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

# Names a hostile or careless agent could give its host, and metric names a caller could try.
EVIL = ["o'brien", 'a"b', "back\\slash", "sl/ash", "new\nline", "' OR 1=1 --",
        '"; DROP DATABASE x', "x'); DROP TABLE gpu_samples; --", "%", "_", "*", "/.*/",
        "tab\there", "nul\x00l"]


class Api:
    def __init__(self, client: TestClient, st: Running, fleet: Fleet, clock: ManualClock):
        self.client, self.st, self.fleet, self.clock = client, st, fleet, clock

    def round(self) -> None:
        self.st.scheduler.collect_once("fleet")
        self.st.scheduler.score_once()
        self.clock.now += STEP

    def get(self, url: str, status: int = 200, **params: Any) -> Any:
        r = self.client.get(url, params=params)
        assert r.status_code == status, r.text
        return r.json()


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    fleet = Fleet({"n001": 2, "n002": 2})
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        a = Api(client, app.state.gpuhealth, fleet, clock)
        for k in range(24):  # two minutes: 60-s buckets of 12 rounds
            fleet.set("n001:gpu1", "gpu_temp", 40.0 + k)
            fleet.set("n001:gpu1", "ecc_sbe_volatile", 3.0 * k)
            fleet.set("n001:gpu1:nvlink0", "nvlink_replay", float(k))
            fleet.set("n002:mlx5_1:1", "ib_port_xmit_data", 1e9 * k)
            a.round()
        yield a


def test_gpu_metrics_over_time(api: Api) -> None:
    body = api.get("/v1/gpus/n001:gpu1/metrics", metric=["gpu_temp", "ecc_sbe_volatile"],
                   **{"from": str(T0), "to": str(T0 + 120), "step": "60"})
    assert (body["entity"], body["scope"], body["source"]) == ("n001:gpu1", "gpu", "sqlite")
    assert (body["start"], body["end"], body["step"]) == (rfc3339(T0), rfc3339(T0 + 120), 60)
    temp, ecc = body["series"]
    assert temp["metric"] == "gpu_temp" and temp["unit"] == "degC" and temp["agg"] == "mean"
    assert temp["times"] == [T0, T0 + 60]
    assert temp["values"] == [pytest.approx(45.5), pytest.approx(57.5)]
    assert (ecc["kind"], ecc["agg"], ecc["rate"]) == ("counter", "max", False)
    assert ecc["values"] == [33.0, 69.0]
    rfc = datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = api.get("/v1/gpus/n001:gpu1/metrics", metric="ecc_sbe_volatile", rate="true",
                   **{"from": rfc, "to": str(T0 + 120), "step": "60"})
    (ecc,) = body["series"]
    assert (ecc["rate"], ecc["unit"], ecc["agg"]) == (True, "errors/s", "mean")
    assert ecc["values"] == [pytest.approx(0.6), pytest.approx(0.6)]


def test_defaults_are_the_last_hour_at_an_auto_step(api: Api) -> None:
    body = api.get("/v1/gpus/n001:gpu1/metrics")
    assert body["end"] == rfc3339(api.clock.now)
    assert body["start"] == rfc3339(api.clock.now - 3600)
    assert body["step"] == 5
    names = [s["metric"] for s in body["series"]]
    assert names == [m.name for m in CATALOG.columns(Scope.GPU)]
    temp = body["series"][0]
    assert len(temp["times"]) == 24 and temp["values"][-1] == 63.0


def test_link_and_port_metrics(api: Api) -> None:
    span = {"from": str(T0), "to": str(T0 + 120), "step": "120"}
    link = api.get("/v1/links/n001:gpu1:nvlink0/metrics", metric="nvlink_replay", **span)
    assert link["series"][0]["values"] == [23.0]
    port = api.get("/v1/ports/n002:mlx5_1:1/metrics", metric="ib_port_xmit_data", rate="true",
                   **span)
    assert port["series"][0]["values"] == [pytest.approx(2e8)]
    other = api.get("/v1/ports/n002:mlx5_0:1/metrics", metric="ib_state", **span)
    assert other["series"][0]["values"] == [4.0]


def test_bad_questions_get_400_saying_what_to_ask(api: Api) -> None:
    url = "/v1/gpus/n001:gpu1/metrics"
    detail = api.get(url, 400, metric="gpu_tmp")["detail"]
    assert detail.startswith("unknown metric 'gpu_tmp'; gpu metrics are: gpu_temp, mem_temp")
    detail = api.get(url, 400, metric="nvlink_replay")["detail"]
    assert "'nvlink_replay' is a metric of nvlink, not of gpu" in detail
    detail = api.get(url, 400, step="1", **{"from": "0", "to": "86400"})["detail"]
    assert "at most 11000: use step >= 8" in detail
    assert "must be before" in api.get(url, 400, **{"from": "100", "to": "100"})["detail"]
    assert "no time zone" in api.get(url, 400, **{"from": "2023-11-14T22:13:20"})["detail"]
    assert "rate=true applies to counters" in api.get(url, 400, metric="gpu_temp",
                                                      rate="true")["detail"]
    api.get(url, 422, step="abc")
    api.get(url, 422, agg="median")


def test_wrong_kind_of_key_is_404(api: Api) -> None:
    assert "not a GPU key" in api.get("/v1/gpus/n001/metrics", 404)["detail"]
    assert "not an NVLink link key" in api.get("/v1/links/n001:gpu1/metrics", 404)["detail"]
    assert "not an InfiniBand port key" in api.get("/v1/ports/n001:gpu1/metrics", 404)["detail"]
    assert "not a node key" in api.get("/v1/nodes/n001:gpu1/metrics", 404)["detail"]


def test_risk_and_node_history_from_sqlite(api: Api) -> None:
    span = {"from": str(T0), "to": str(T0 + 120), "step": "60"}
    for url in ("/v1/gpus/n001:gpu1/risk", "/v1/nodes/n001/risk"):
        body = api.get(url, **span)
        assert (body["source"], body["step"]) == ("sqlite", 60)
        risk, level = body["series"]
        assert (risk["metric"], risk["agg"], risk["kind"]) == ("risk", "max", "risk")
        assert (level["metric"], level["unit"]) == ("level", "alert level")
        # The first minute is written; the one under way carries its value forward.
        assert risk["times"] == level["times"] == [T0, T0 + 60]
        assert all(0.0 <= v <= 1.0 for v in risk["values"])
    node = api.get("/v1/nodes/n001/metrics", **span)
    assert [s["metric"] for s in node["series"]] == ["risk"]
    gpu = api.get("/v1/gpus/n001:gpu1/metrics", metric=["risk", "gpu_temp"], **span)
    assert [len(s["values"]) for s in gpu["series"]] == [2, 2]
    assert api.get("/v1/links/n001:gpu1:nvlink0/risk", **span)["series"][0]["values"] == []
    assert "kept only in InfluxDB" in api.get("/v1/ports/n001:mlx5_0:1/metrics", 501,
                                              metric="ib_ber")["detail"]


# ---- hostile names ------------------------------------------------------------------------------

def _tables(db: sqlite3.Connection) -> dict[str, int]:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: db.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}


def test_hostile_names_find_nothing_and_change_nothing(api: Api, settings: Settings) -> None:
    db = sqlite3.connect(settings.storage.sqlite_path)
    before = _tables(db)
    assert before["gpu_samples"] > 0 and before["gpu_rounds"] > 0
    span = {"from": str(T0), "to": str(T0 + 120)}
    answered = 0
    for evil in EVIL:
        for url in (f"/v1/gpus/{quote(evil + ':gpu0', safe='')}/metrics",
                    f"/v1/links/{quote(evil + ':gpu0:nvlink0', safe='')}/metrics",
                    f"/v1/ports/{quote('n001:' + evil + ':1', safe='')}/metrics",
                    f"/v1/nodes/{quote(evil, safe='')}/metrics"):
            r = api.client.get(url, params=span)
            assert r.status_code in (200, 400, 404, 501), (evil, url, r.text)
            if r.status_code == 200:
                answered += 1
                assert name_problem(evil) is None, (evil, url)  # refused before any query
                assert all(not s["times"] for s in r.json()["series"]), (evil, url)
        r = api.client.get("/v1/gpus/n001:gpu1/metrics", params={"metric": evil, **span})
        assert r.status_code == 400, (evil, r.text)
        for param in ("from", "to", "step", "agg"):
            r = api.client.get("/v1/gpus/n001:gpu1/metrics", params={param: evil})
            assert r.status_code in (400, 422), (evil, param, r.text)
    assert answered > 0  # valid names reached the store's query and found nothing
    assert _tables(db) == before
    db.close()


def _batch(hosts: list[str], ts: float) -> Batch:
    table = EntityTable(Scope.GPU, [Entity.gpu(h, 0) for h in hosts])
    cols = CATALOG.columns(Scope.GPU)
    values = np.full((len(hosts), len(cols)), np.nan)
    values[:, CATALOG.column(Scope.GPU, "gpu_temp")] = np.arange(len(hosts)) + 30.0
    b = Batch()
    b.add(Frame(table, np.arange(len(hosts), dtype=np.int32), np.full(len(hosts), ts), values))
    return b


def test_odd_host_names_are_stored_and_found_exactly(settings: Settings) -> None:
    """Quotes and backslashes never become entities (ingest and Entity refuse them); what the
    hostname grammar allows, SQL LIKE wildcards included, finds its own points and only its
    own (no LIKE-style or regex matching)."""
    for evil in EVIL:
        if name_problem(evil) is not None:
            with pytest.raises(ValueError, match="not a valid gpu entity"):
                Entity.gpu(evil, 0)
    hosts = ["_", "a_b", "a-b", "a.b", "ab", "n001.rack-1.cluster_x", "A" * 63]
    p = build_pipeline(settings)
    try:
        p.ingest(_batch(hosts, T0), T0)
    finally:
        p.close()
    h = SQLiteHistory(settings.storage.sqlite_path)
    for i, host in enumerate(hosts):
        q = build_query(Entity.gpu(host, 0), ["gpu_temp"], start=T0, end=T0 + 60, now=T0)
        (s,) = h.series(q)
        assert s.values == [30.0 + i], host
    for bad in ("new\nline", "nul\x00l", "tab\there"):  # never an entity to query for
        with pytest.raises(ValueError, match="not a valid gpu entity"):
            Entity.gpu(bad, 0)
