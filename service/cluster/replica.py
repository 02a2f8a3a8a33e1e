"""This replica's part in the cluster, tick by tick, for the pipeline (service.pipeline):

- its roles this tick (service.cluster.roles): a role just gained starts from the shared
  state, as a restart would (the writer restores its shard's open alerts, the leader restarts
  notification and remediation from the shared state and takes the storm over);
- which nodes are its own (service.cluster.ownership): only their transitions and flags are
  written and only their alerts restored; a new shard map (service.cluster.members) hands
  the nodes it lost over and restores the alerts of the nodes it gained;
- who judges the fleet's storm: alone, the writer from its own nodes; across shards, the
  leader from the census every writer publishes to (service.cluster.census)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from service.cluster.census import Census
from service.cluster.members import Membership
from service.cluster.ownership import Ownership
from service.cluster.roles import SOLE, Roles
from service.cluster.shard_map import ShardMap, local_in
from service.notify.build import Notification
from service.remediation.controller import RemediationController
from service.stages.alert_machine import FlagChange, Transition
from service.stages.alert_restore import AlertRestore
from service.stages.fleet_alerts import FLEET_NODE, FleetAlerts, FleetWide
from service.stages.windows import WindowStore
from service.tick import FleetCount

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Turn:
    """The roles this replica holds for one tick."""

    writing: bool  # steps and writes its shard's alerts
    leading: bool  # notifies, remediates and judges the fleet's storm across shards


class Replica:
    def __init__(self, roles: Roles, ownership: Ownership, restore: AlertRestore, *,
                 lock: threading.RLock, store: WindowStore, fleet: FleetAlerts,
                 owns_store: bool, count: FleetCount, members: Membership | None = None,
                 census: Census | None = None, notification: Notification | None = None,
                 controller: RemediationController | None = None) -> None:
        self.roles, self.ownership, self.restorer = roles, ownership, restore
        self.lock, self.store, self.fleet, self.owns_store = lock, store, fleet, owns_store
        self.count, self.members, self.census = count, members, census
        self.notification, self.controller = notification, controller
        # Alone, both roles from the start; a replica gains them at a tick (claim).
        self._writing = self._leading = roles is SOLE
        self._restored_map: ShardMap | None = None  # the map the alert state was restored for
        if members is not None:
            self._restored_map = members.map
            members.on_change.append(self.rebalance)
        if controller is not None:
            controller.acting = roles.leader
            controller.owns = self.owns
        restore.restore(self.owns)

    @property
    def shared(self) -> bool:
        """Other replicas write the shared state too: what changed there no tick sees here."""
        return self.roles is not SOLE

    def owns(self, node: str) -> bool:
        """Whether this shard owns `node` now (a fleet alert's "*" is everyone's)."""
        return node == FLEET_NODE or self.ownership.owns(node)

    def claim(self, now: float) -> Turn:
        """This tick's roles; a role just gained starts from the shared state."""
        turn = Turn(self.roles.writer(), self.roles.leader())
        if turn.writing:
            self._restore_gained()
        if turn.leading and not self._leading:
            self._lead(now)
        self._writing, self._leading = turn.writing, turn.leading
        return turn

    def _restore_gained(self) -> None:
        """The writer: every open alert of its nodes when it just became the writer, those of
        the nodes a new map gave it otherwise."""
        members = self.members
        if not self._writing:
            log.warning("this replica now writes its shard's alerts: restoring them")
            with self.lock:
                self.restorer.reset()
                self.restorer.restore(self.owns)
                self._restored_map = members.map if members is not None else None
        elif members is not None and members.map is not self._restored_map:
            before, now_map = self._restored_map, members.map
            log.warning("the shard map changed: restoring the open alerts of the nodes this "
                        "shard gained")
            with self.lock:
                self.restorer.restore(lambda n: n != FLEET_NODE and local_in(now_map, n)
                                      and not local_in(before, n))
            self._restored_map = now_map

    def _lead(self, now: float) -> None:
        log.warning("this replica is now the leader: notifications and remediation "
                    "continue from the shared state")
        if self.notification is not None:
            self.notification.dispatcher.restart()
        if self.controller is not None:
            self.controller.reconcile(now)
        if self.census is not None:  # the fleet's storm is the leader's to judge
            self.restorer.storm()

    def mine(self, transitions: list[Transition], flags: list[FlagChange]
             ) -> tuple[list[Transition], list[FlagChange]]:
        """Of this tick's transitions and flag changes, those this shard writes: nodes being
        handed over are the new owner's to write."""
        if not self.ownership.sharded:
            return transitions, flags
        return ([t for t in transitions if self.owns(t.node)],
                [f for f in flags if self.owns(f.node)])

    def rebalance(self, old: ShardMap | None, new: ShardMap | None) -> None:
        """Before a new shard map is used (the membership thread): forget the nodes it hands
        to other shards (their alerts stay open for the new owner). The writer restores the
        alerts of the nodes it gains at its next tick (claim); their windows are warm-started
        by service.runtime.rebalance."""
        with self.lock:
            held = {*self.store.registry.nodes, *self.fleet.nodes()}
            self.hand_over([n for n in held if not local_in(new, n)])

    def hand_over_strays(self) -> None:
        """Under live membership: the nodes whose writes arrived under an older map."""
        if self.members is not None:
            self.hand_over([n for n in self.store.registry.nodes if not self.owns(n)])

    def hand_over(self, lost: Sequence[str]) -> None:
        if not lost or not self.owns_store:  # a shared store is its owner's to forget
            return
        self.store.forget_nodes(lost)
        self.fleet.forget_nodes(set(lost))
        log.warning("handed %d nodes to other shards (%s%s): forgotten here, their alerts "
                    "stay open for the new owner", len(lost), ", ".join(sorted(lost)[:5]),
                    " ..." if len(lost) > 5 else "")

    @property
    def wide(self) -> FleetWide | None:
        """What the fleet alerts hand this shard's counts to across shards (None: alone)."""
        return self.publish if self.census is not None else None

    def publish(self, size: int, hot: int) -> None:
        """This shard's part of the fleet census; the leader judges the storm from the sum.
        What it publishes is its own nodes with a history, never `size` (a declared size)."""
        assert self.census is not None
        try:
            self.census.publish(self.count.live, hot)
        except Exception:  # the census is advisory: a lost row ages out, scoring goes on
            log.exception("could not publish this shard's fleet census")

    def storm(self, turn: Turn, local: list[Transition], now: float
              ) -> tuple[list[Transition], bool] | None:
        """The storm's transitions this replica applies this tick, and whether other writers
        change alerts too; None: the storm is not its to judge. Alone, the writer judges it
        from its own nodes (`local`, from the fleet alerts' step); across shards, the leader
        judges it, and the fleet's size for the breaker, from every shard's census."""
        if self.census is None:
            return (local, self.shared) if turn.writing else None
        if not turn.leading:
            return None
        totals = self.census.totals()
        self.count.live = totals.live
        return self.fleet.judge(now, self.count.size(), totals.hot), True

    def close(self) -> None:
        self.roles.close()  # hands its leases over at once rather than by expiry
        if self.census is not None:
            self.census.close()

