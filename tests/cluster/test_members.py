"""Live shard membership on a real PostgreSQL (service.cluster.members): members heartbeat,
the leader alone publishes the map (epoch + 1 per change), every process follows it; a member
silent for the ttl leaves. And the write route follows the map in force: 503 while this shard
is not in it, 307 to the new owner after a change."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.app import create_app
from service.cluster.members import Members, Membership
from service.cluster.roles import LeasedRoles
from service.cluster.shard_map import Shard, ShardMap
from service.settings import Settings

TTL = 1.0
TOKEN = "members-test-token"


def _process(dsn: str, replica: str, shard: str, ttl: float = TTL, renew: float = 0.3
             ) -> LeasedRoles:
    roles = LeasedRoles(dsn, replica_id=replica, shard_id=shard, ttl_s=ttl, renew_s=renew)
    roles.membership = Membership(Members(dsn, ttl_s=ttl), replica_id=replica, shard_id=shard,
                                  url=f"http://{shard}.test:8080", leader=roles.leader,
                                  leader_lease=roles.leader_lease, renew_s=renew)
    return roles


def _shards(roles: LeasedRoles) -> list[str]:
    assert roles.membership is not None
    smap = roles.membership.map
    return sorted(smap.shards) if smap is not None else []


@pytest.fixture
def procs(pg_dsn: str) -> Iterator[list[LeasedRoles]]:
    made: list[LeasedRoles] = []
    yield made
    for r in made:
        r.close()


def test_members_join_and_leave_and_only_the_leader_publishes(
        pg_dsn: str, procs: list[LeasedRoles]) -> None:
    a = _process(pg_dsn, "ra", "a")
    procs.append(a)
    a.step()  # first: the leader; publishes itself
    assert a.leader() and _shards(a) == ["a"]
    assert a.membership is not None and a.membership.epoch == 1

    b = _process(pg_dsn, "rb", "b")
    procs.append(b)
    b.step()  # heartbeats, is not the leader: the map it reads does not name it yet
    assert not b.leader() and b.membership is not None
    assert b.membership.map is None and b.membership.epoch == 1
    assert not b.membership.owns("node0001")
    b.step()
    assert b.membership.epoch == 1, "a member that is not the leader published a map"
    # Not the leader: publishing is refused inside the transaction (fenced by the lease).
    assert b.membership.members.publish(b.leader_lease) is None

    a.step()  # the leader sees b's heartbeat: epoch 2 names both
    b.step()
    assert a.membership.epoch == b.membership.epoch == 2
    assert _shards(a) == _shards(b) == ["a", "b"]
    for host in (f"node{i:04d}" for i in range(50)):  # the two processes agree on every owner
        assert a.membership.owns(host) != b.membership.owns(host)
    a.step()
    assert a.membership.epoch == 2  # unchanged live set: no new epoch

    # b goes silent (killed: no leave). After the ttl the leader drops it.
    b.membership.members.close()
    procs.remove(b)
    time.sleep(TTL + 0.2)
    a.step()
    assert a.membership.epoch == 3 and _shards(a) == ["a"]
    assert all(a.membership.owns(f"node{i:04d}") for i in range(50))

    # A clean stop leaves at once: no ttl to wait out.
    c = _process(pg_dsn, "rc", "c")
    procs.append(c)
    c.step()
    a.step()
    assert _shards(a) == ["a", "c"] and a.membership.epoch == 4
    c.stop()
    procs.remove(c)
    a.step()
    assert _shards(a) == ["a"] and a.membership.epoch == 5


def test_the_new_leader_publishes_after_the_old_one_dies(pg_dsn: str,
                                                         procs: list[LeasedRoles]) -> None:
    a, b = _process(pg_dsn, "ra", "a"), _process(pg_dsn, "rb", "b")
    procs += [a, b]
    a.step()
    b.step()
    a.step()
    b.step()
    assert _shards(b) == ["a", "b"] and not b.leader()
    assert a.membership is not None
    a.membership.members.close()  # a dies holding the leader lease
    procs.remove(a)
    time.sleep(TTL + 0.2)
    b.step()  # takes the lease, then publishes the live set: itself
    assert b.leader() and _shards(b) == ["b"]
    assert b.membership is not None and b.membership.epoch == 3


def test_membership_settings_are_checked() -> None:
    dsn = {"postgres": {"dsn": "postgresql://u@db/x"}}
    ok = Settings(storage=dsn, cluster={"membership": "postgres", "shard_id": "a",  # type: ignore[arg-type]
                                        "advertise_url": "http://a:8080/"})
    assert ok.cluster.advertise_url == "http://a:8080"
    for cluster, said in (
            ({"membership": "postgres", "shard_id": "a"}, "advertise_url"),
            ({"membership": "postgres", "advertise_url": "http://a:8080"}, "shard_id"),
            ({"membership": "postgres", "shard_id": "a", "advertise_url": "a:8080"},
             "http(s) URL"),
            ({"advertise_url": "http://a:8080"}, "membership postgres"),
            ({"membership": "postgres", "shard_id": "a", "advertise_url": "http://a:1",
              "shards": [{"id": "a", "url": "http://a:1"}]}, "static membership")):
        with pytest.raises(ValidationError, match=said.replace("(", r"\(").replace(")", r"\)")):
            Settings(storage=dsn, cluster=cluster)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"needs storage\.postgres\.dsn"):
        Settings(cluster={"membership": "postgres", "shard_id": "a",  # type: ignore[arg-type]
                          "advertise_url": "http://a:8080"})
    assert Settings().cluster.membership == "static"


def _write(client: TestClient, host: str) -> int:
    line = f"gpu,host={host},gpu=0 gpu_temp=40.5 1700000000000000000\n"
    return client.post("/write?precision=ns&db=x", content=line,
                       headers={"Authorization": f"Token {TOKEN}"}).status_code


def test_the_write_route_follows_the_published_map(pg_dsn: str, tmp_path: Path,
                                                   procs: list[LeasedRoles]) -> None:
    # Shard a (this test, ttl long enough that nobody else takes the lead) leads and has
    # published a map of itself alone.
    a = _process(pg_dsn, "ra", "a", ttl=60.0, renew=20.0)
    procs.append(a)
    a.step()
    settings = Settings(  # type: ignore[arg-type]
        storage={"data_dir": tmp_path / "b", "postgres": {"dsn": pg_dsn}},
        ingest={"tokens": [TOKEN], "coalesce_ms": 0},
        cluster={"membership": "postgres", "shard_id": "b", "replica_id": "rb",
                 "advertise_url": "http://b.test:8080", "lease_ttl_s": 60.0,
                 "lease_renew_s": 20.0})
    with TestClient(create_app(settings, schedule=False), follow_redirects=False) as client:
        roles = client.app.state.gpuhealth.pipeline.cluster  # type: ignore[attr-defined]
        assert isinstance(roles, LeasedRoles) and roles.membership is not None
        assert roles.membership.map is None  # started, heartbeating, not in the map
        r = client.post("/write?precision=ns&db=x", content="gpu,host=n1,gpu=0 gpu_temp=4 1\n",
                        headers={"Authorization": f"Token {TOKEN}"})
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        assert "not in the shard map yet" in r.text
        # Unauthorised: the route's 401, not the 503 (the map is nobody's business then).
        assert client.post("/write?db=x", content="gpu,host=n1,gpu=0 gpu_temp=4 1\n"
                           ).status_code == 401

        a.step()  # the leader publishes {a, b}
        roles.step()  # b's next renewal: the map is in force
        smap = ShardMap([Shard("a", "http://a.test:8080"), Shard("b", "http://b.test:8080")],
                        "b")
        mine = next(h for h in (f"node{i:04d}" for i in range(100)) if smap.is_local(h))
        theirs = next(h for h in (f"node{i:04d}" for i in range(100)) if not smap.is_local(h))
        assert _write(client, mine) == 204
        line = f"gpu,host={theirs},gpu=0 gpu_temp=40.5 1700000000000000000\n"
        r = client.post("/write?precision=ns&db=x", content=line,
                        headers={"Authorization": f"Token {TOKEN}"})
        assert r.status_code == 307
        assert r.headers["Location"] == "http://a.test:8080/write?precision=ns&db=x"

        # a leaves (a clean stop); the leader role passes to b, which publishes {b}: the
        # node that was a's is b's now, written here.
        a.close()
        procs.remove(a)
        roles.step()
        assert roles.leader() and roles.membership.epoch == 3
        assert _write(client, theirs) == 204
