"""Who leads and whether it is doing its job, as `/v1/cluster` and `/readyz` tell it: the
leader lease's holder, epoch and since when (the shared state's word, the same from any
replica), whether this replica leads and since when, whether its notification sender and its
remediation are running, and when each receiver was last told anything (the shared
notification log: whichever replica sent it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from service.api.timefmt import Timestamp
from service.cluster.roles import LeasedRoles

if TYPE_CHECKING:
    from service.pipeline import Pipeline

log = logging.getLogger(__name__)


class LeaderOut(BaseModel):
    replica: str = Field(description="the leader lease's holder (\"\" while nobody holds it)")
    epoch: int = Field(description="the lease's fencing token: +1 each time it changes hands")
    since: Timestamp | None = Field(description="when the holder took it (null: none holds it)")


class ClusterTruth(BaseModel):
    leader: LeaderOut
    leading: bool = Field(description="this replica holds the leader lease, by its own clock")
    leading_since: Timestamp | None = None
    dispatcher_running: bool = Field(description=(
        "this replica leads and its notification sender is running"))
    remediation_running: bool = Field(description=(
        "this replica leads and its remediation controller may start actions"))
    last_notified: dict[str, Timestamp] = Field(default_factory=dict, description=(
        "per receiver, when it was last told anything, by whichever replica led then"))


def cluster_truth(p: Pipeline) -> ClusterTruth:
    """What this replica knows now; the shared state's part is left empty where it does not
    answer (readiness says so already)."""
    roles = p.cluster
    leading = roles.leader()
    note, ctl = p.notification, p.controller
    last: dict[str, float] = {}
    if note is not None:
        try:
            last = note.notification_log.last_sent()
        except Exception as e:  # the shared state is down: /readyz names it
            log.debug("cluster truth: the notification log does not answer: %s", e)
    if isinstance(roles, LeasedRoles):
        try:
            cur = roles.leader_lease.current()
        except Exception as e:
            log.debug("cluster truth: the lease does not answer: %s", e)
            cur = None
        held = cur is not None and bool(cur.holder)
        leader = LeaderOut(replica=cur.holder if held and cur else "",
                           epoch=cur.epoch if cur is not None else 0,
                           since=cur.acquired_at if held and cur else None)
        since = roles.leader_lease.since
    else:  # one process on its own file: it always leads
        leader = LeaderOut(replica=p.settings.cluster.replica_id or "self", epoch=0, since=None)
        since = None
    return ClusterTruth(
        leader=leader, leading=leading, leading_since=since,
        dispatcher_running=leading and note is not None and note.sender.running,
        remediation_running=leading and ctl is not None and ctl.acting(),
        last_notified=last)


def truth_problems(t: ClusterTruth) -> list[str]:
    """Why a replica that leads cannot do its job (readiness)."""
    if t.leading and not t.dispatcher_running:
        return ["this replica leads but its notification sender is not running: nothing "
                "would be sent"]
    return []
