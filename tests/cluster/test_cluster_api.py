"""/v1/cluster and the role gauge: one process holds both roles on its own file; replicas on
PostgreSQL hold what their leases say, and every replica names the same holders."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings
from tests.support.fleet import T0, ManualClock


def _settings(tmp: Path, **extra: object) -> Settings:
    return Settings.model_validate({"storage": {"data_dir": str(tmp / "data"), **extra}})


def _role_gauges(client: TestClient) -> dict[str, float]:
    out = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gpuhealth_cluster_role{"):
            role = line.split('role="')[1].split('"')[0]
            out[role] = float(line.rsplit(" ", 1)[1])
    return out


def test_one_process_holds_both_roles(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path), clock=ManualClock(T0), schedule=False)
    with TestClient(app) as client:
        got = client.get("/v1/cluster").json()
        assert got["shared_state"] == "sqlite" and got["leases"] is None
        assert got["roles"] == {"writer": True, "leader": True}
        assert _role_gauges(client) == {"writer": 1.0, "leader": 1.0}


def test_replicas_on_postgres_report_their_leases(tmp_path: Path, pg_dsn: str) -> None:
    a = create_app(_settings(tmp_path / "a", postgres={"dsn": pg_dsn}).model_copy(
        update={"cluster": Settings().cluster.model_copy(update={"replica_id": "a"})}),
        clock=ManualClock(T0), schedule=False)
    b = create_app(_settings(tmp_path / "b", postgres={"dsn": pg_dsn}).model_copy(
        update={"cluster": Settings().cluster.model_copy(update={"replica_id": "b"})}),
        clock=ManualClock(T0), schedule=False)
    with TestClient(a) as ca, TestClient(b) as cb:
        sa, sb = ca.get("/v1/cluster").json(), cb.get("/v1/cluster").json()
        assert sa["shared_state"] == "postgres" and sa["replica"] == "a"
        assert sa["roles"] == {"writer": True, "leader": True}  # a started first
        assert sb["roles"] == {"writer": False, "leader": False}
        for s in (sa, sb):
            assert s["leases"]["leader"]["holder"] == "a"
            assert s["leases"]["writer"]["holder"] == "a"
        assert sa["leases"]["leader"]["epoch"] == 1 and sb["leases"]["leader"]["epoch"] == 0
        assert _role_gauges(ca) == {"writer": 1.0, "leader": 1.0}
        assert _role_gauges(cb) == {"writer": 0.0, "leader": 0.0}


def test_live_membership_shows_the_published_map(tmp_path: Path, pg_dsn: str) -> None:
    settings = Settings.model_validate({
        "storage": {"data_dir": str(tmp_path / "data"), "postgres": {"dsn": pg_dsn}},
        "cluster": {"membership": "postgres", "shard_id": "a", "replica_id": "a1",
                    "advertise_url": "http://127.0.0.1:9"}})
    app = create_app(settings, clock=ManualClock(T0), schedule=False)
    with TestClient(app) as client:
        got = client.get("/v1/cluster").json()
        assert got["membership"] == "postgres"
        # This replica leads, so it published the first map with itself in it.
        assert got["map_epoch"] == 1
        assert got["shards"] == [{"id": "a", "url": "http://127.0.0.1:9"}]
        assert "gpuhealth_cluster_map_epoch 1.0" in client.get("/metrics").text
