"""Every shared-state store opened on one target, as the service's parts open them: what a
fresh shared state looks like (its layout), and what an upgraded one must end as. A store added
to the service without being added here fails tests/storage/test_pg_migrations.py."""

from __future__ import annotations

import ast
from pathlib import Path

from service.api.auth import TokenStore
from service.api.cursor_key import KeyStore
from service.api.idempotency import IdempotencyStore
from service.cluster.census import Census
from service.cluster.lease import Lease
from service.cluster.members import Members
from service.diagnostics.runs import RunStore
from service.learning.model_registry import ModelRegistry
from service.learning.verdicts import VerdictStore
from service.notify.notification_log import NotificationLog
from service.notify.record import RecordReceiver
from service.notify.silences import SilenceStore
from service.remediation.actions import ActionStore
from service.remediation.breaker import CircuitBreaker
from service.remediation.config import RemediationSettings
from service.runtime import replay_progress
from service.stages.alert_store import AlertStore
from service.stages.gpu_identity import GpuIdentities
from service.stages.label_store import LabelStore
from service.stages.window_ledger import WindowLedger
from service.storage.state_db import StateStore, StateTarget

REPO = Path(__file__).resolve().parents[2]

# ReplayProgress needs a trace to open; its table is what it creates, so its schema stands in.
OPENED = ("AlertStore", "LabelStore", "TokenStore", "IdempotencyStore", "KeyStore",
          "ActionStore", "NotificationLog", "RecordReceiver", "SilenceStore", "Members",
          "Census", "Lease", "RunStore", "ModelRegistry", "VerdictStore", "ReplayProgress",
          "GpuIdentities", "WindowLedger")


def open_every_state_store(target: StateTarget) -> None:
    """Open (then close) every store of the shared state on `target`: each creates what it
    lacks, in its current shape."""
    alerts, labels = AlertStore(target), LabelStore(target)
    actions = ActionStore(target)
    CircuitBreaker(actions, RemediationSettings())  # its tables live in the actions' database
    stores: list[StateStore] = [
        alerts, labels, actions, VerdictStore(target, alerts, labels), TokenStore(target),
        IdempotencyStore(target), KeyStore(target), NotificationLog(target),
        RecordReceiver(target), SilenceStore(target), Members(target), Census(target, "s0"),
        Lease(target, "layout", "r0"), RunStore(target), ModelRegistry(target),
        StateStore(target, replay_progress._SCHEMA), GpuIdentities(target),
        WindowLedger(target)]
    for store in stores:
        store.close()


def state_store_classes() -> set[str]:
    """Names of the classes under service/ built on StateStore (read from the source, so
    nothing heavy is imported)."""
    found: set[str] = set()
    for path in (REPO / "service").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "StateStore" for b in node.bases):
                found.add(node.name)
    return found
