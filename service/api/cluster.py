"""The cluster as this replica sees it: its shard, the roles it holds, who holds each lease
(from the shared state, so any replica answers the same), the shard map it routes by, and who
leads and whether its sender and remediation run (service.api.cluster_truth)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from service.api.auth import require
from service.api.cluster_truth import ClusterTruth, cluster_truth
from service.api.principals import Permission
from service.api.problems import READ_ERRORS
from service.api.state import State
from service.cluster.roles import LeasedRoles

router = APIRouter()


class LeaseOut(BaseModel):
    held: bool  # by this replica, by its own clock
    epoch: int  # of this replica's hold (0: never held)
    holder: str  # who holds it now, as the shared state says ("" when it ran out)


class ShardOut(BaseModel):
    id: str
    url: str


class ClusterOut(ClusterTruth):
    replica: str | None
    shard: str | None
    shared_state: str  # sqlite (one process) or postgres (shared by replicas)
    roles: dict[str, bool]  # writer, leader
    leases: dict[str, LeaseOut] | None = None  # with replicas
    membership: str  # static (cluster.shards) or postgres (the map the leader publishes)
    map_epoch: int | None = None  # of the published map in force here (membership postgres)
    shards: list[ShardOut]  # the map in force: every shard and its URL


@router.get("/v1/cluster", tags=["fleet"], dependencies=[Depends(require(Permission.READ))],
            response_model=ClusterOut, responses=READ_ERRORS,
            summary="This replica's shard and roles, the lease holders and the shard map")
def cluster_status(st: State) -> ClusterOut:
    p = st.pipeline
    c = p.settings.cluster
    roles = p.cluster
    out = ClusterOut(
        **cluster_truth(p).model_dump(),
        replica=c.replica_id or None, shard=c.shard_id or None,
        shared_state="postgres" if p.settings.storage.postgres.dsn.get_secret_value()
        else "sqlite",
        roles={"writer": roles.writer(), "leader": roles.leader()},
        membership=c.membership, shards=[ShardOut(id=s.id, url=s.url) for s in c.shards])
    if p.members is not None:
        smap = p.members.map
        out.map_epoch = p.members.epoch
        out.shards = [] if smap is None else [ShardOut(id=s.id, url=s.url)
                                              for s in smap.shards.values()]
    if isinstance(roles, LeasedRoles):
        out.replica, out.shard = roles.replica_id, roles.shard_id
        out.leases = {name: LeaseOut(held=lease.held(), epoch=lease.epoch,
                                     holder=cur.holder if cur is not None else "")
                      for name, lease in (("writer", roles.writer_lease),
                                          ("leader", roles.leader_lease))
                      for cur in (lease.current(),)}
    return out
