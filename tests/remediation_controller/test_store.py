from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.remediation.actions import (
    Action,
    ActionNotFound,
    ActionState,
    ActionStore,
    AuditEntry,
    action_id,
)
from service.remediation.config import RemediationSettings
from tests.remediation_controller.conftest import T0


def _action(state: ActionState = ActionState.PLANNED, episode: str = "7") -> Action:
    return Action(id=action_id("n1", "fp", "migrate", episode), kind="migrate", episode=episode,
                  node="n1", alert_id=int(episode), fingerprint="fp", summary="ecc",
                  mode="auto", state=state, requested_at=T0, deadline=T0 + 300,
                  plan=[{"call": "drain n1"}])


def _audit(event: str = "requested") -> AuditEntry:
    return AuditEntry(at=T0, actor="gpuhealth", event=event, action_id="x", node="n1")


def test_settings_are_safe_by_default() -> None:
    s = RemediationSettings()
    assert (s.mode, s.release_mode, s.hook) == ("dry_run", "approve", "slurm")
    assert (s.breaker_max_fraction, s.breaker_max_nodes, s.breaker_window_s) == (0.1, 5, 1800)
    assert (s.max_concurrent, s.max_attempts_per_node, s.event_ttl_s) == (2, 2, 300)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("mode", "yolo", "mode"),
    ("breaker_max_fraction", 0.0, "breaker_max_fraction"),
    ("breaker_max_fraction", 1.5, "breaker_max_fraction"),
    ("max_concurrent", 0, "max_concurrent"),
    ("opt_out_nodes", ["gpu-*", " "], "empty pattern"),
    ("retry_backoff_s", 10_000.0, "retry_backoff_s"),
    ("unknown_knob", 1, "unknown_knob"),
])
def test_settings_reject_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RemediationSettings.model_validate({field: value})


def test_opt_out_globs() -> None:
    s = RemediationSettings(opt_out_nodes=["login-*", "gpu-00[12]"])
    assert s.opted_out("gpu-001") == "gpu-00[12]"
    assert s.opted_out("gpu-003") is None


def test_action_id_is_stable_per_episode() -> None:
    a = action_id("n1", "fp", "migrate", "7")
    assert a == action_id("n1", "fp", "migrate", "7")
    assert a != action_id("n1", "fp", "migrate", "8")
    assert a != action_id("n1", "fp", "release", "7")


def test_insert_is_idempotent_and_round_trips(state_target: str) -> None:
    store = ActionStore(state_target)
    first, created = store.insert(_action(), _audit())
    again, created2 = store.insert(_action(), _audit())
    assert (created, created2) == (True, False)
    assert again == first == store.get(first.id)
    assert len(store.audit()) == 1
    assert store.counts()["planned"] == 1


def test_illegal_transitions_raise(state_target: str) -> None:
    store = ActionStore(state_target)
    a, _ = store.insert(_action(ActionState.DRY_RUN), _audit())
    with pytest.raises(ValueError, match="illegal transition dry_run -> executing"):
        store.update(a.id, state=ActionState.EXECUTING)
    b, _ = store.insert(_action(episode="8"), _audit())
    store.update(b.id, state=ActionState.EXECUTING)
    store.update(b.id, state=ActionState.SUCCEEDED)
    with pytest.raises(ValueError, match="illegal"):
        store.update(b.id, state=ActionState.PLANNED)
    with pytest.raises(ValueError, match="cannot start"):
        store.insert(_action(ActionState.EXECUTING, episode="9"), _audit())
    with pytest.raises(ActionNotFound):
        store.update("act-nope", state=ActionState.ABORTED)


def test_find_filters(state_target: str) -> None:
    store = ActionStore(state_target)
    store.insert(_action(ActionState.DRY_RUN, "1"), _audit())
    store.insert(_action(ActionState.PLANNED, "2"), _audit())
    assert [a.episode for a in store.find(state="planned")] == ["2"]
    assert len(store.find(node="n1")) == 2
    assert store.find(node="n2") == []
    assert [a.episode for a in store.open_actions()] == ["2"]


def test_audit_is_append_only_even_for_raw_sql(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = ActionStore(path)
    store.append_audit(_audit())
    raw = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("UPDATE audit SET actor = 'mallory'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM audit")
    raw.close()
    assert [e.actor for e in store.audit()] == ["gpuhealth"]
    store.append_audit(_audit("approved"))
    assert [e.event for e in store.audit(after_seq=1)] == ["approved"]
