from __future__ import annotations

from collections.abc import Callable

import pytest

from service.remediation.actions import ActionConflict
from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def _drained(rig: Rig, node: str = "n1") -> None:
    rig.ctl.request(migration(node), T0)
    rig.run(T0 + 1)
    assert rig.model.nodes[node].drained


def test_only_nodes_we_drained(make_rig: MakeRig) -> None:
    rig = make_rig(release_mode="auto")
    with pytest.raises(ActionConflict, match="not drained by gpuhealth"):
        rig.ctl.release("n1", "alice", T0)
    rig.model.drain_by_operator("n2")
    with pytest.raises(ActionConflict, match="not drained by gpuhealth"):
        rig.ctl.release("n2", "alice", T0)
    assert rig.model.nodes["n2"].drained and rig.hook.calls == []


def test_a_dry_run_drained_nothing_to_release(make_rig: MakeRig) -> None:
    rig = make_rig(mode="dry_run", release_mode="auto")
    rig.ctl.request(migration("n1"), T0)
    with pytest.raises(ActionConflict):
        rig.ctl.release("n1", "alice", T0 + 1)


def test_release_needs_approval_by_default(make_rig: MakeRig) -> None:
    rig = make_rig()
    _drained(rig)
    r = rig.ctl.release("n1", "gpuhealth", T0 + 100)
    assert r.state == "awaiting_approval" and r.kind == "release"
    assert rig.ctl.release("n1", "gpuhealth", T0 + 101).id == r.id  # asked twice: one action
    rig.run(T0 + 102)
    assert rig.model.nodes["n1"].drained
    rig.ctl.approve(r.id, "alice", T0 + 200)
    rig.run(T0 + 201)
    assert rig.state(r) == "succeeded" and not rig.model.nodes["n1"].drained
    assert [c for c in rig.hook.calls if c[0] == "release"] == [("release", "n1")]
    with pytest.raises(ActionConflict):  # released already
        rig.ctl.release("n1", "alice", T0 + 202)


def test_release_modes(make_rig: MakeRig) -> None:
    auto = make_rig(release_mode="auto")
    _drained(auto)
    r = auto.ctl.release("n1", "alice", T0 + 10)
    auto.run(T0 + 11)
    assert auto.state(r) == "succeeded" and not auto.model.nodes["n1"].drained

    dry = make_rig(release_mode="dry_run")
    _drained(dry)
    r = dry.ctl.release("n1", "alice", T0 + 10)
    dry.run(T0 + 11)
    assert dry.state(r) == "dry_run" and dry.model.nodes["n1"].drained
    assert [e.dry_run for e in dry.store.audit(action_id=r.id)] == [True]

    off = make_rig(release_mode="off")
    _drained(off)
    with pytest.raises(ActionConflict, match="release_mode is off"):
        off.ctl.release("n1", "alice", T0 + 10)
    assert off.store.audit()[-1].event == "release_refused"
    assert off.model.nodes["n1"].drained


def test_an_expired_release_can_be_asked_again(make_rig: MakeRig) -> None:
    rig = make_rig(approval_ttl_s=600)
    _drained(rig)
    first = rig.ctl.release("n1", "gpuhealth", T0 + 10)
    rig.run(T0 + 700)
    assert rig.state(first) == "expired"
    second = rig.ctl.release("n1", "gpuhealth", T0 + 800)
    assert second.id != first.id and second.state == "awaiting_approval"
