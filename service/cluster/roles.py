"""What this replica may do now. Two roles, each behind a lease in the shared state:

- the **writer** of a shard (`writer:<shard>`): steps the alert machine of the shard's nodes and
  persists its alerts (one writer per shard, or two replicas would open the same episode
  twice);
- the **leader** of the fleet (`leader`): sends notifications and runs remediation, for every
  shard's alerts, which it reads from the shared state.

A single process on its own file holds both, always (SOLE). Replicas that are neither still
ingest and score, so a standby's windows are warm when it takes over."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Protocol

from service.cluster.lease import Lease, LeaseKeeper
from service.cluster.members import Membership
from service.storage.state_db import StateTarget

log = logging.getLogger(__name__)

LEADER = "leader"
# After gaining one lease, how long (and how often) to retry the other before the next renewal.
CATCH_UP_S = 1.0
CATCH_UP_EVERY_S = 0.1


class Roles(Protocol):
    def writer(self) -> bool: ...

    def leader(self) -> bool: ...

    def close(self) -> None: ...


class _Sole:
    """One process, nobody to share with."""

    def writer(self) -> bool:
        return True

    def leader(self) -> bool:
        return True

    def close(self) -> None:
        pass


SOLE: Roles = _Sole()


def default_replica_id(port: int) -> str:
    return f"{socket.gethostname()}:{port}:{os.getpid()}"


class LeasedRoles:
    """Both roles from leases, renewed together by one keeper thread (`start`), or by `step`
    in tests. Together: a replica that dies leaves both leases to run out at the same moment,
    so its standby takes both at once and its first tick as leader also writes the alerts (a
    thread per lease let them expire up to a renewal apart, and the standby led for a tick
    with no alert of its own to send: issue 36)."""

    def __init__(self, target: StateTarget, *, replica_id: str, shard_id: str = "default",
                 ttl_s: float = 15.0, renew_s: float = 5.0) -> None:
        self.replica_id, self.shard_id = replica_id, shard_id
        self.writer_lease = Lease(target, f"writer:{shard_id}", replica_id, ttl_s=ttl_s,
                                  renew_s=renew_s)
        self.leader_lease = Lease(target, LEADER, replica_id, ttl_s=ttl_s, renew_s=renew_s)
        self._keepers = [LeaseKeeper(self.writer_lease), LeaseKeeper(self.leader_lease)]
        self.renew_s = renew_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Live shard membership (cluster.membership postgres), on the same cadence: its
        # heartbeat and the map follow each renewal, after the leases (the leader publishes).
        self.membership: Membership | None = None

    def writer(self) -> bool:
        return self.writer_lease.held()

    def leader(self) -> bool:
        return self.leader_lease.held()

    def step(self) -> None:
        for k in self._keepers:
            k.step()
        if self.membership is not None:
            self.membership.step()

    def start(self) -> None:
        """One renewal now (the first tick knows its roles and map), then the keeper."""
        self.step()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)
        self._thread.start()
        if self.membership is not None:
            self.membership.start()

    def _run(self) -> None:
        while not self._stop.wait(self.renew_s):
            self.cycle()

    def cycle(self) -> None:
        """Renew both, back to back, so both leases run out together. Back to back is still
        some milliseconds apart: a dead holder's second lease can outlive its first by that
        much, and a standby that takes the first would then wait a whole renewal for the
        second (leading for a tick with nothing written: one of 36 gate rounds paged 5 s
        late). So right after gaining one lease, try the other again for a short while."""
        before = [k.lease.held() for k in self._keepers]
        after = [k.step() for k in self._keepers]
        gained = any(a and not b for a, b in zip(after, before, strict=True))
        if not gained or all(after):
            return
        missing = [k for k, held in zip(self._keepers, after, strict=True) if not held]
        deadline = time.monotonic() + min(CATCH_UP_S, self.renew_s / 4)
        while missing and time.monotonic() < deadline and not self._stop.wait(CATCH_UP_EVERY_S):
            missing = [k for k in missing if not k.step()]

    def stop(self, release: bool = True) -> None:
        if self.membership is not None:
            self.membership.stop(leave=release)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for k in self._keepers:
            k.stop(release)

    def close(self) -> None:
        self.stop()
        self.writer_lease.close()
        self.leader_lease.close()
        if self.membership is not None:
            self.membership.members.close()

    def status(self) -> dict[str, object]:
        out: dict[str, object] = {"replica": self.replica_id, "shard": self.shard_id}
        for role, lease in (("writer", self.writer_lease), ("leader", self.leader_lease)):
            cur = lease.current()
            out[role] = {"held": lease.held(), "epoch": lease.epoch,
                         "holder": cur.holder if cur is not None else ""}
        return out
