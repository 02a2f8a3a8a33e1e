"""The shard map and the `cluster` settings it is built from."""

from __future__ import annotations

import pytest

from service.cluster.settings import ClusterSettings
from service.cluster.shard_map import Shard, ShardMap
from service.settings import SettingsError, load

SHARDS = [{"id": "a", "url": "http://127.0.0.1:8081/"}, {"id": "b", "url": "http://b:8080"},
          {"id": "c", "url": "https://c.example:8443"}]


def test_no_shards_no_map() -> None:
    assert ShardMap.from_settings(ClusterSettings()) is None


def test_the_map_owns_every_host_once_and_knows_itself() -> None:
    m = ShardMap.from_settings(load(cluster={"shard_id": "b", "shards": SHARDS}).cluster)
    assert m is not None
    assert m.local == Shard("b", "http://b:8080")
    assert m.shards["a"].url == "http://127.0.0.1:8081"  # the trailing '/' dropped
    owners = {m.owner(f"n{i:03d}").id for i in range(300)}
    assert owners == {"a", "b", "c"}
    assert all(m.is_local(h) == (m.owner(h).id == "b") for h in (f"n{i}" for i in range(300)))


@pytest.mark.parametrize("host", ["", "-n1", "a b", "n1,n2", "x" * 300, "n1..x"])
def test_a_host_ingest_refuses_has_no_owner(host: str) -> None:
    m = ShardMap([Shard("a", "http://a")], "a")
    with pytest.raises(ValueError, match="host"):
        m.owner(host)


@pytest.mark.parametrize("cluster,says", [
    ({"shard_id": "a", "shards": [{"id": "a", "url": "ftp://x"}]}, "http(s) URL with a host"),
    ({"shard_id": "a", "shards": [{"id": "a", "url": "http://"}]}, "http(s) URL with a host"),
    ({"shard_id": "a", "shards": [{"id": "a", "url": "http://x/?q=1"}]}, "query"),
    ({"shard_id": "a", "shards": [{"id": "a", "url": "http://x"}, {"id": "a", "url": "http://y"}]},
     "unique"),
    ({"shard_id": "z", "shards": SHARDS}, "must name one of"),
    ({"shard_id": "", "shards": SHARDS}, "must name one of"),
    ({"shard_id": "a b", "shards": [{"id": "a b", "url": "http://x"}]}, "shard id"),
    ({"lease_ttl_s": 5, "lease_renew_s": 5}, "lease_renew_s must be less"),
    ({"vnodes": 0}, "vnodes"),
    ({"shards": [{"id": "a", "url": "http://x", "weight": 2}], "shard_id": "a"}, "weight"),
])
def test_bad_cluster_settings_are_refused(cluster: dict[str, object], says: str) -> None:
    with pytest.raises(SettingsError, match="cluster") as got:
        load(cluster=cluster)
    assert says in str(got.value)


def test_the_environment_sets_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_CLUSTER__SHARD_ID", "a")
    monkeypatch.setenv("GPUHEALTH_CLUSTER__SHARDS", '[{"id": "a", "url": "http://a:8080"}]')
    c = load().cluster
    assert c.shard_id == "a" and c.shards[0].url == "http://a:8080"
    assert (c.vnodes, c.lease_ttl_s, c.lease_renew_s, c.replica_id) == (64, 15.0, 5.0, "")
