"""The cluster's settings (`cluster`): this replica's shard, the shard map and the leader lease."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from collectors.frames import name_problem


class ShardSettings(BaseModel):
    """One shard of `cluster.shards`: its id and the base URL agents and peers reach it at."""

    model_config = ConfigDict(extra="forbid")

    id: str
    url: str

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        # Ids appear in logs, metrics labels and problem bodies: the host-name grammar.
        why = name_problem(v, "shard id")
        if why is not None:
            raise ValueError(why)
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("shard url is not an http(s) URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("shard url has a query or fragment; give its base URL")
        return v.rstrip("/")


class ClusterSettings(BaseModel):
    """Sharding by node and the leader lease (docs/design.md, "Sharding"). `shards` empty: this
    process owns every node (one shard, today's behaviour)."""

    replica_id: str = ""  # default: <hostname>:<service.port>
    shard_id: str = ""  # this process's shard; must name one of `shards` when shards is set
    shards: list[ShardSettings] = Field(default_factory=list)
    vnodes: int = Field(default=64, ge=1, le=4096)  # virtual nodes per shard on the ring
    lease_ttl_s: float = Field(default=15.0, gt=0)
    lease_renew_s: float = Field(default=5.0, gt=0)
    # static: the map is `shards`; postgres: live members register in PostgreSQL and the
    # leader publishes the map (service.cluster.members), `shards` stays empty.
    membership: Literal["static", "postgres"] = "static"
    advertise_url: str = ""  # with postgres membership: this shard's base URL, as shards' are

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSettings:
        ids = [s.id for s in self.shards]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"cluster.shards: shard ids must be unique ({', '.join(twice)} "
                             "given twice)")
        if self.shards and self.shard_id not in ids:
            raise ValueError("cluster.shard_id must name one of cluster.shards "
                             f"({', '.join(ids)}), got {self.shard_id[:80]!r}")
        if self.lease_renew_s >= self.lease_ttl_s:
            raise ValueError("cluster.lease_renew_s must be less than cluster.lease_ttl_s")
        if self.membership == "postgres":
            if self.shards:
                raise ValueError("cluster.shards is for static membership; with membership "
                                 "postgres the leader publishes the map")
            if not self.shard_id:
                raise ValueError("cluster.membership postgres needs cluster.shard_id")
            if not self.advertise_url:
                raise ValueError("cluster.membership postgres needs cluster.advertise_url "
                                 "(this shard's base URL, which agents and peers reach)")
            try:  # the same checks as a shard's id and URL in `shards`
                self.advertise_url = ShardSettings(id=self.shard_id, url=self.advertise_url).url
            except ValidationError as exc:
                said = "; ".join(str(e["msg"]) for e in exc.errors())
                raise ValueError(f"cluster.shard_id / cluster.advertise_url: {said}") from None
        elif self.advertise_url:
            raise ValueError("cluster.advertise_url is for membership postgres")
        return self
