"""A consistent-hash ring with virtual nodes: which shard owns a host name.

Each shard is placed on a 64-bit ring at `vnodes` points; a host belongs to the first point
at or after its own hash (wrapping round). Adding a shard takes about 1/n of the hosts, all
of them to the new shard; removing one hands only its hosts to the others. The hash is
blake2b (8-byte digest) of the UTF-8 name, never Python's hash(): every process, on every
Python version, must agree on the owner, or agents and shards would bounce samples around.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

_POINT_SEP = "#"  # a shard's virtual node n is hashed as "<shard id>#<n>"


def stable_hash(name: str) -> int:
    """A 64-bit hash of `name`, the same in every process and Python version."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")


class Ring:
    """The ring of `shard_ids`, each at `vnodes` points."""

    def __init__(self, shard_ids: Sequence[str], vnodes: int = 64) -> None:
        if not shard_ids:
            raise ValueError("a ring needs at least one shard")
        if len(set(shard_ids)) != len(shard_ids):
            raise ValueError("shard ids on a ring must be unique")
        if vnodes < 1:
            raise ValueError("vnodes must be at least 1")
        points = sorted((stable_hash(f"{sid}{_POINT_SEP}{n}"), sid)
                        for sid in shard_ids for n in range(vnodes))
        self._hashes = [h for h, _ in points]
        self._owners = [sid for _, sid in points]
        self.shard_ids = tuple(shard_ids)
        self.vnodes = vnodes

    def owner(self, host: str) -> str:
        """The id of the shard that owns `host`."""
        i = bisect.bisect_left(self._hashes, stable_hash(host))
        return self._owners[i if i < len(self._owners) else 0]
