"""A replica that starts as a standby leaves the leader's actions alone (issue 36): it settles
what a restart left running only when it becomes the leader. bench.cluster caught a restarted
replica re-planning, at its start, the drains the new leader had in flight (the webhook hook
cannot tell whether a node is drained, so every one went back to PLANNED), and the leader then
ran each drain a second time."""

from __future__ import annotations

import threading
from pathlib import Path

from service.assembly import Wiring, build_parts
from service.cluster.roles import LeasedRoles
from service.remediation.actions import ActionState, ActionStore
from service.settings import Settings
from tests.postgres import PostgresServer
from tests.remediation_controller.conftest import T0, migration
from tests.remediation_controller.scheduler_model import SchedulerModel
from tests.remediation_controller.test_replicas import Replica


def test_a_standby_starting_does_not_replan_the_leaders_action_in_flight(
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    # Replicas share PostgreSQL (one SQLite file has one process, which leads alone).
    state_target = postgres_server.fresh_schema()
    leader = Replica(state_target, SchedulerModel(4))
    leader.hook.gate = threading.Event()  # the drain hangs in the hook, in flight
    try:
        a = leader.ctl.request(migration("n1"), T0)
        assert a is not None and leader.hook.entered.wait(5)
        settings = Settings.model_validate({
            "storage": {"data_dir": str(tmp_path / "standby"),
                        "postgres": {"dsn": state_target}},
            "remediation": {"mode": "auto", "hook": "webhook",
                            "hook_config": {"url": "http://127.0.0.1:9/never",
                                            "secret": "0123456789abcdef0123"}}})
        parts = build_parts(settings, Wiring.offline(alert_db=state_target, remediate=True))
        try:
            assert isinstance(parts.cluster, LeasedRoles)
            store = ActionStore(state_target)
            try:
                got = store.get(a.id)
            finally:
                store.close()
            assert got is not None and got.state == ActionState.EXECUTING
        finally:
            if parts.controller is not None:
                parts.controller.close()
            parts.cluster.close()
    finally:
        leader.hook.gate.set()
        leader.close()
