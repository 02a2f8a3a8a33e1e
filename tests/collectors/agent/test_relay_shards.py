"""A relay's body holds many nodes; a sharded service splits it by owner
(service.api.shard_split): each node's samples land on its own shard and nowhere else."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.agent.push import Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Relay
from collectors.agent.relay_http import RelayServer
from collectors.agent.spool import Spool
from collectors.schema import batch_to_lines
from tests.cluster.shards import TOKEN, Shards
from tests.support.fleet import T0, Fleet

pytest.importorskip("pyarrow")


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[Shards]:
    s = Shards(tmp_path / "shards")
    for sid in s.ids:
        s.start(sid)
    yield s
    s.stop_all()


def test_a_relay_body_is_split_to_each_nodes_shard(tmp_path: Path, shards: Shards) -> None:
    owned = shards.hosts(per_shard=2)
    spool = Spool(tmp_path / "spool", 1 << 20, suffix=SPOOL_SUFFIX)
    relay = Relay(spool, Pusher(shards.urls["a"] + "/write", token=TOKEN), wall=lambda: T0)
    server = RelayServer(relay, "127.0.0.1", 0)
    server.start()
    try:
        for hosts in owned.values():
            for host in hosts:
                text = "".join(ln + "\n" for ln in batch_to_lines(Fleet({host: 8}).batch(T0)))
                agent = Pusher(f"http://127.0.0.1:{server.port}/write")
                assert agent.push(gzip.compress(text.encode())).status == 204
        assert relay.flush() == 1  # every node in one body, sent to shard a
        assert relay.forward() == 1 and relay.stats.bodies_refused_in_part == 0
    finally:
        server.shutdown()
        server.server_close()
    for sid, hosts in owned.items():
        for host in hosts:
            for key in (f"{host}:gpu0", f"{host}:gpu7", f"{host}:gpu3:nvlink1"):
                assert shards.holders(key) == [sid], key
