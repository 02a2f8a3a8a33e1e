"""Every query of every shipped dashboard, run against a real InfluxDB holding what the sink
wrote from a replayed cluster with a failure: each must run and return data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.base import CollectorStatus
from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.assembly import Wiring
from service.grafana.inventory import ALL, all_queries, expand
from service.history.influx.client import InfluxClient
from service.history.influx.sink import InfluxSink
from service.notify.message import Delivery, Message
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

ROUNDS = 60
# States this 5-minute trace never reaches (an alert open at level 1 at the end, a level 3 that
# steps down without resolving): those queries must run, but may return nothing.
MAY_BE_EMPTY = {"Open at level 1 [A]", "Alert level changes per interval [C]"}


# The whole server (issue 31's wire schema): per node two supplies, four fans and its own
# sensors, with n1's PSU1 failing part way and its fans' readings moving.
CHASSIS = {
    Scope.PSU: EntityTable(Scope.PSU, [Entity.psu(n, str(i)) for n in ("n0", "n1")
                                       for i in range(2)]),
    Scope.FAN: EntityTable(Scope.FAN, [Entity.fan(n, str(i)) for n in ("n0", "n1")
                                       for i in range(4)]),
    Scope.NODE: EntityTable(Scope.NODE, [Entity(Scope.NODE, n) for n in ("n0", "n1")]),
}
READINGS = {"psu_input_v": 230.0, "psu_output_w": 1100.0, "psu_temp_c": 40.0, "fan_rpm": 9000.0,
            "fan_pct": 60.0, "fan_rpm_lower_critical": 1800.0, "inlet_temp_c": 24.0,
            "exhaust_temp_c": 38.0, "psu_redundant": 1.0, "fan_redundant": 1.0,
            "bmc_reachable": 1.0}


def add_chassis(b: Batch, t: float, k: int) -> None:
    for scope, table in CHASSIS.items():
        cols = CATALOG.columns(scope)
        v = np.array([[READINGS.get(m.name, 0.0) for m in cols]] * len(table))
        v[:, [j for j, m in enumerate(cols) if m.name.endswith("_total")]] = k  # counters grow
        if scope is Scope.PSU and k >= 20:  # n1's PSU1 fails: Critical, not delivering
            row = table.index(Entity.psu("n1", "1"))
            for name, value in (("psu_health", 2.0), ("psu_state", 3.0), ("psu_output_w", 0.0)):
                v[row, CATALOG.column(scope, name)] = value
        if scope is Scope.FAN:
            v[:, CATALOG.column(scope, "fan_rpm")] -= 20.0 * k
        n = len(table)
        b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, t), v))


class DownPager:
    """A receiver whose far end refuses everything (no retry), for the failed-delivery panels."""

    name = "pager"

    async def notify(self, msg: Message) -> Delivery:
        return Delivery(ok=False, retry=False, detail="pager unreachable")
QUERIES = all_queries()


@pytest.fixture(scope="module")
def filled(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> InfluxClient:
    tmp = Path(tmp_path_factory.mktemp("dash"))
    s = Settings(storage={"data_dir": tmp, "influxdb": {  # type: ignore[arg-type]
        "url": influx_server.url, "database": "dashboards", "cluster": "c1",
        "raw_retention": "INF"}},
        # Quick resolves, so the trace shows every kind of level change.
        alerts={"resolve_for_s": 30, "dwell_s": (0, 0, 0)},
        notify={"route": {"receiver": "record", "group_wait_s": 0, "group_interval_s": 5,
                          "routes": [{"matchers": ["level>=2"], "receiver": "pager",
                                      "continue": True}]},
                "receivers": [{"name": "pager", "type": "webhook",
                               "config": {"url": "http://127.0.0.1:9/never-used"}}]})
    # A pager that is down, so the failed-delivery panels have something to show.
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "alerts.db"), notifiers=[DownPager()],
                                         notify_background=False))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    sink.track_collectors(lambda: {("n0", "nvml"): CollectorStatus(),
                                   ("n1", "infiniband"): CollectorStatus(False, "sysfs gone")})
    r = Rounds(nodes=2, gpus=4, links=2, ports=2)
    for g in range(4):
        for name, value in (("pcie_link_width", 16.0), ("pcie_link_width_max", 16.0),
                            ("pcie_link_gen", 5.0), ("pcie_link_gen_max", 5.0)):
            r.set(f"n0:gpu{g}", name, value)
            r.set(f"n1:gpu{g}", name, value)
    try:
        for k in range(ROUNDS):
            t = T0 + 5 * k
            r.add("n0:gpu1", "ecc_sbe_volatile", 40.0)
            r.add("n0:gpu1", "ecc_sbe_aggregate", 40.0)
            r.add("n1:mlx5_1:1", "ib_symbol_error", 50.0)
            r.add("n0:gpu2:nvlink1", "nvlink_crc_flit", 10.0)
            if k == 10:
                r.set("n0:gpu3", "gpu_temp", 97.0)  # past shutdown: a hard thermal signal
            if k == 14:
                r.set("n0:gpu3", "gpu_temp", 55.0)
            if k == 30:
                r.set("n1:gpu2", "ecc_dbe_volatile", 1.0)
                r.set("n1:gpu3", "retired_pages_dbe", 2.0)
            if k == 35:
                r.set("n1:gpu1", "pcie_link_width", 8.0)  # the link retrained narrower
            b = r.batch(t)
            add_chassis(b, t, k)
            if k == 22:
                b.events.add("n1", t, "sel", 2.0)  # the supply's failure in the BMC's log
            if k == 25:
                b.events.add("n1:gpu0", t, "xid", 79.0)  # fell off the bus
            if k == 40:
                b.events.add("n0:gpu0", t, "xid", 13.0)  # a graphics engine exception
            p.process(b, t)
        assert sink.flush(60)
    finally:
        p.close()
    return InfluxClient(s.storage.influxdb)


@pytest.mark.parametrize("q", QUERIES, ids=[f"{q.dashboard}:{q.title}" for q in QUERIES])
def test_every_dashboard_query_runs_and_returns_data(filled: InfluxClient, q: object) -> None:
    from service.grafana.inventory import DashboardQuery

    assert isinstance(q, DashboardQuery)
    sql = expand(q.query, {"cluster": "c1", "node": ALL, "gpu": ALL, "device": ALL},
                 time_range=(T0, T0 + 5 * ROUNDS), interval="30s")
    results = filled.query(sql)  # raises on any InfluxQL error
    series = [s for statement in results for s in statement]
    assert series or q.title in MAY_BE_EMPTY, f"{q.title}: no data for\n{sql}"
    for s in series:
        assert s.columns and s.values, f"{q.title}: empty series"
        if q.kind == "panel" and s.columns[0] == "time":
            assert all(isinstance(row[0], int) for row in s.values)


def _panel(title: str) -> str:
    (found,) = [q.query for q in QUERIES if q.dashboard == "gpuhealth-node" and q.title == title]
    return found


def test_the_node_panels_show_the_failed_supply_and_the_narrow_link(
        filled: InfluxClient) -> None:
    """What an operator looks for: the failing supply's state and output, the GPU whose PCIe
    link retrained narrower, each as its own series on n1's dashboard."""
    def series(title: str) -> dict[str, list[float]]:
        sql = expand(_panel(title), {"cluster": "c1", "node": "n1", "gpu": ALL},
                     time_range=(T0, T0 + 5 * ROUNDS), interval="30s")
        return {",".join(s.tags.values()): [row[1] for row in s.values if row[1] is not None]
                for statement in filled.query(sql) for s in statement}

    state = series("Power supply state [A]")
    assert max(state["1"]) == 3 and max(state["0"]) == 0  # not delivering; delivering
    assert min(series("Power supply output [A]")["1"]) == 0
    width = series("GPU PCIe link width vs maximum [A]")
    assert min(width["1"]) == 8 and min(width["0"]) == 16
    fans = series("Fan speed vs lower critical [A]")
    assert set(fans) == {"0", "1", "2", "3"} and min(fans["0"]) < max(fans["0"])
