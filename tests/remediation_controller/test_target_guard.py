"""The controller never hands a hook a node name that is not one plain host name: a migration
requested for a Slurm hostlist (an agent that sent host `gpu[001-512]`) ends at once, audited
with why, in every mode, and the hook is never called; a dry run says it would be refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.remediation_controller.conftest import T0, Rig, migration


@pytest.mark.parametrize("node", ["gpu[001-512]", "--all", "a,b"])
def test_a_hostile_node_name_ends_the_action_without_a_hook_call(
        make_rig: Callable[..., Rig], node: str) -> None:
    rig = make_rig()
    a = rig.ctl.request(migration(node=node), T0)
    rig.run(T0)
    assert rig.state(a) == "expired"
    assert a is not None
    assert any("not one plain host name" in e.result for e in rig.store.audit(action_id=a.id))
    assert rig.hook.executed() == []


def test_a_dry_run_says_it_would_be_refused(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(mode="dry_run")
    a = rig.ctl.request(migration(node="-h"), T0)
    assert a is not None and rig.state(a) == "dry_run"
    assert a.result["would_execute"] is False
    assert str(a.result["detail"]).startswith("would be refused: target: ")
