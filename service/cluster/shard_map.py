"""The shard map from the settings: which shard owns a node, and whether it is this one.

`cluster.shards` empty: there is no map, this process owns every node (one shard). Otherwise
every shard (its id and base URL) sits on one consistent-hash ring (service.cluster.ring), so
every shard and every agent that reads the same settings agrees on each node's owner. Host
names are checked the way ingest checks them (collectors.frames.name_problem): a name ingest
would refuse has no owner, and is left to the local write path, which refuses it by line.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.frames import name_problem
from service.cluster.ring import Ring
from service.cluster.settings import ClusterSettings


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard: its id and the base URL it is reached at (no trailing '/')."""

    id: str
    url: str


class ShardMap:
    """Shards on a ring; `local_id` is the shard this process is."""

    def __init__(self, shards: list[Shard], local_id: str, vnodes: int = 64) -> None:
        by_id = {s.id: s for s in shards}
        if len(by_id) != len(shards):
            raise ValueError("shard ids must be unique")
        if local_id not in by_id:
            raise ValueError(f"the local shard {local_id!r} is not one of the shards")
        self.shards = by_id
        self.local = by_id[local_id]
        self.ring = Ring([s.id for s in shards], vnodes)

    @classmethod
    def from_settings(cls, cluster: ClusterSettings) -> ShardMap | None:
        """The map `cluster` configures; None when it names no shards (one process owns all)."""
        if not cluster.shards:
            return None
        return cls([Shard(s.id, s.url) for s in cluster.shards], cluster.shard_id,
                   cluster.vnodes)

    def owner(self, host: str) -> Shard:
        """The shard that owns `host`; ValueError for a name ingest would refuse."""
        why = name_problem(host, "host")
        if why is not None:
            raise ValueError(why)
        return self.shards[self.ring.owner(host)]

    def is_local(self, host: str) -> bool:
        """Whether this shard owns `host` (ValueError as `owner`)."""
        return self.owner(host).id == self.local.id


def local_in(smap: ShardMap | None, host: str) -> bool:
    """Whether `smap` gives `host` to its local shard; False without a map (a shard not in
    the published map owns nothing) and for a name ingest would refuse (nobody's)."""
    if smap is None:
        return False
    try:
        return smap.is_local(host)
    except ValueError:
        return False
