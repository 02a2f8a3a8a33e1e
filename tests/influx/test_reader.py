"""History from a real influxd: the same answers as the SQLite store for the same rounds (both
are written by one Pipeline), risk over time, and hostile names that must find nothing, raise
no InfluxQL error and change nothing in any database."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from collectors.frames import Entity, name_problem
from service.api.app import create_app
from service.history.history import (
    Agg,
    HistoryUnavailable,
    QueryError,
    build_query,
)
from service.history.history_sqlite import SQLiteHistory
from service.history.influx.client import InfluxClient
from service.history.influx.reader import InfluxHistory
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.api.test_history_api import EVIL, _batch
from tests.history.test_history import ROUNDS, check_semantics, feed, points, q
from tests.influx.server import InfluxServer, free_port
from tests.pipeline.builders import T0
from tests.support.fleet import ManualClock

_db = itertools.count()
SPAN = {"from": str(T0), "to": str(T0 + 5 * ROUNDS)}


def settings(srv: InfluxServer, tmp: Path, **influx: object) -> Settings:
    cfg = {"url": srv.url, "database": f"r{next(_db)}", "cluster": "c1",
           "raw_retention": "INF", **influx}
    return Settings(storage={"data_dir": tmp, "influxdb": cfg})  # type: ignore[arg-type]


def write(s: Settings, *feeds: object) -> None:
    """Through the real pipeline into InfluxDB (and, beside it, the SQLite store)."""
    p = build_pipeline(s)
    try:
        for f in feeds:
            f(p)  # type: ignore[operator]
        (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
        assert sink.flush(30)
    finally:
        p.close()


@pytest.fixture(scope="module")
def stored(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    s = settings(influx_server, tmp_path_factory.mktemp("reader"))
    write(s, feed)
    return s


@pytest.fixture
def influx(stored: Settings) -> Iterator[InfluxHistory]:
    h = InfluxHistory.from_settings(stored.storage.influxdb)
    yield h
    h.close()


def test_influx_history_semantics(influx: InfluxHistory) -> None:
    check_semantics(influx)


def test_derived_ber_is_read_from_influxdb(influx: InfluxHistory) -> None:
    (ber,) = influx.series(q("n0:mlx5_0:1", "ib_ber", step=5))
    # One symbol error per 5 s at 400 Gb/s, from the second reading on.
    assert ber.values == pytest.approx([1 / (400e9 * 5)] * (ROUNDS - 1))


def test_influx_and_sqlite_agree(influx: InfluxHistory, stored: Settings) -> None:
    lite = SQLiteHistory(stored.storage.sqlite_path)
    cases = [("n0:gpu0", ("gpu_temp", "mem_temp", "ecc_sbe_volatile", "xid"), False, None),
             ("n0:gpu0", ("ecc_sbe_volatile", "pcie_replay"), True, None),
             ("n0:gpu0", ("ecc_sbe_volatile",), True, Agg.MAX),
             ("n0:gpu0", ("remapped_rows_pending", "throttle_thermal"), False, Agg.LAST),
             ("n0:gpu1", ("gpu_temp",), False, Agg.COUNT),
             ("n0:gpu0:nvlink0", ("nvlink_crc_flit", "nvlink_state"), False, Agg.MIN),
             ("n0:mlx5_0:1", ("ib_symbol_error", "ib_port_xmit_data"), True, None)]
    for key, metrics, rate, agg in cases:
        for step in (5, 15, 60, 3600):
            query = q(key, *metrics, step=step, rate=rate, agg=agg)
            a, b = points(influx.series(query)), points(lite.series(query))
            assert a.keys() == b.keys()
            for m in a:
                assert [t for t, _ in a[m]] == [t for t, _ in b[m]], (key, m, step)
                assert [v for _, v in a[m]] == pytest.approx([v for _, v in b[m]]), (key, m)


def test_risk_over_time_through_the_api(stored: Settings) -> None:
    app = create_app(stored, clock=ManualClock(T0 + 3600), schedule=False)
    with TestClient(app) as c:
        r = c.get("/v1/gpus/n0:gpu0/risk", params={**SPAN, "step": "60"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["source"] == "influxdb"
        risk, level = body["series"]
        # Two Xids at rounds 3 and 4: a hard rule, level 3 from then on.
        assert (risk["metric"], risk["agg"], risk["times"]) == ("risk", "max", [T0, T0 + 60])
        assert risk["values"] == [1.0, 1.0] and level["values"] == [3.0, 3.0]
        early = c.get("/v1/gpus/n0:gpu0/risk",
                      params={"from": str(T0), "to": str(T0 + 15), "step": "5"}).json()
        assert early["series"][0]["values"] == [0.0, 0.0, 0.0]
        calm = c.get("/v1/gpus/n0:gpu1/metrics", params={**SPAN, "metric": ["risk", "gpu_temp"],
                                                          "step": "120"}).json()
        assert [s["values"] for s in calm["series"]] == [[0.0], [55.0]]
        node = c.get("/v1/nodes/n0/metrics", params={**SPAN, "step": "120"})
        assert node.status_code == 200, node.text
        assert node.json()["series"][0]["metric"] == "risk"
        assert node.json()["series"][0]["values"] == [1.0]
        assert c.get("/v1/nodes/n0/risk", params=SPAN).json()["series"][0]["values"]
        ecc = c.get("/v1/gpus/n0:gpu0/metrics",
                    params={**SPAN, "metric": "ecc_sbe_volatile", "rate": "true", "step": "120"})
        assert ecc.json()["series"][0]["values"] == [pytest.approx((0.4 * 22 + 0.2) / 23)]


def test_a_database_not_yet_written_has_no_points(influx_server: InfluxServer,
                                                   tmp_path: Path) -> None:
    h = InfluxHistory.from_settings(settings(influx_server, tmp_path).storage.influxdb)
    assert points(h.series(q("n0:gpu0", "gpu_temp", "risk"))) == {"gpu_temp": [], "risk": []}


def test_unreachable_influxdb_is_unavailable(tmp_path: Path) -> None:
    s = Settings(storage={"data_dir": tmp_path,  # type: ignore[arg-type]
                          "influxdb": {"url": f"http://127.0.0.1:{free_port()}",
                                       "timeout_s": 2}})
    h = InfluxHistory.from_settings(s.storage.influxdb)
    with pytest.raises(HistoryUnavailable, match="unreachable"):
        h.series(q("n0:gpu0", "gpu_temp"))


# ---- hostile names against the real server ------------------------------------------------------

def _state(srv: InfluxServer, dbs: list[str]) -> dict[str, object]:
    values = srv.query("SHOW DATABASES")[0]["values"]
    assert isinstance(values, list)
    names = {str(v[0]) for v in values}
    counts = {db: srv.count("gpu", "gpu_temp", db) for db in dbs}
    risk = {db: srv.count("risk", "risk", db) for db in dbs}
    return {"databases": names, "gpu": counts, "risk": risk}


@pytest.mark.slow
def test_hostile_names_find_nothing_and_change_nothing(influx_server: InfluxServer,
                                                       stored: Settings,
                                                       tmp_path: Path) -> None:
    srv = influx_server
    srv.query('CREATE DATABASE "sentinel"')
    srv.query('CREATE DATABASE "x"')  # what `"; DROP DATABASE x` would drop
    httpx.post(f"{srv.url}/write", params={"db": "sentinel"},
               content=b"gpu,host=n0,gpu=0 gpu_temp=1 1000000000\n").raise_for_status()
    db = stored.storage.influxdb.database
    before = _state(srv, [db, "sentinel", "x"])
    assert before["gpu"] == {db: ROUNDS * 2, "sentinel": 1, "x": 0}
    app = create_app(stored, clock=ManualClock(T0 + 3600), schedule=False)
    answered = 0
    with TestClient(app) as c:
        for evil in EVIL:
            for url in (f"/v1/gpus/{quote(evil + ':gpu0', safe='')}/metrics",
                        f"/v1/gpus/{quote(evil + ':gpu0', safe='')}/risk",
                        f"/v1/links/{quote(evil + ':gpu0:nvlink0', safe='')}/metrics",
                        f"/v1/ports/{quote('n0:' + evil + ':1', safe='')}/metrics",
                        f"/v1/nodes/{quote(evil, safe='')}/metrics"):
                r = c.get(url, params=SPAN)
                assert r.status_code in (200, 400, 404), (evil, url, r.text)
                if r.status_code == 200:
                    answered += 1
                    assert all(not s["times"] for s in r.json()["series"]), (evil, url)
            r = c.get("/v1/gpus/n0:gpu0/metrics", params={"metric": evil, **SPAN})
            assert r.status_code == 400, (evil, r.text)
    # Names that are no valid host or device name are refused before any query (they could
    # never have been stored); the rest reach the store's query and find nothing.
    assert answered == 5 * sum(name_problem(e) is None for e in EVIL) > 0
    # A hostile cluster name in the settings is a value like any other: no data, no error.
    for evil in EVIL:
        cfg = stored.storage.influxdb.model_copy(update={"cluster": evil})
        h = InfluxHistory(InfluxClient(cfg), evil)
        try:
            assert all(not s.times for s in h.series(q("n0:gpu0", "gpu_temp", "risk", "xid")))
        except QueryError as exc:
            assert "control character" in str(exc)
        finally:
            h.close()
    assert _state(srv, [db, "sentinel", "x"]) == before


def test_odd_host_names_are_stored_and_found_exactly(influx_server: InfluxServer,
                                                     tmp_path: Path) -> None:
    # Quotes, backslashes and the like never become entities (ingest refuses them, and so
    # does Entity); what the hostname grammar allows, InfluxQL patterns included, finds only
    # its own points.
    for evil in EVIL:
        if name_problem(evil) is not None:
            with pytest.raises(ValueError, match="not a valid gpu entity"):
                Entity.gpu(evil, 0)
    hosts = ["_", "a_b", "a-b", "a.b", "ab", "n001.rack-1.cluster_x", "A" * 63]
    s = settings(influx_server, tmp_path)
    write(s, lambda p: p.ingest(_batch(hosts, T0), T0))
    h = InfluxHistory.from_settings(s.storage.influxdb)
    try:
        for i, host in enumerate(hosts):
            query = build_query(Entity.gpu(host, 0), ["gpu_temp"], start=T0, end=T0 + 60, now=T0)
            (found,) = h.series(query)
            assert found.values == [30.0 + i], host
    finally:
        h.close()
