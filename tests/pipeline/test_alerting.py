import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from service.alert_store import AlertStore
from service.alerting import AlertMachine, AlertPolicy

ENTS = [Entity.gpu("n0", g) for g in range(3)]


def _run(m: AlertMachine, risks: list[float], hard: bool = False, step: float = 5.0,
         start: float = 0.0) -> list[tuple[float, int, int]]:
    out = []
    for i, r in enumerate(risks):
        now = start + i * step
        for t in m.step(Scope.GPU, np.array([r], np.float32), np.array([hard]), now, ENTS):
            out.append((now, t.old, t.new))
    return out


def test_for_durations_and_levels() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 20, 10)))
    # Level 1 at once; level 2 only after risk held 20 s; level 3 after 10 s above 0.9.
    got = _run(m, [0.35, 0.65, 0.65, 0.65, 0.65, 0.65, 0.95, 0.95, 0.95])
    assert got == [(0, 0, 1), (25, 1, 2), (40, 2, 3)]


def test_a_spike_shorter_than_the_for_duration_does_not_escalate() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 20, 10)))
    assert _run(m, [0.65, 0.65, 0.1, 0.65, 0.1]) == [(0, 0, 1)]


def test_hard_rules_page_at_once() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 120, 60)))
    assert _run(m, [1.0], hard=True) == [(0, 0, 3)]


def test_hysteresis_and_resolve_delay() -> None:
    m = AlertMachine(AlertPolicy(resolve_for_s=30))
    got = _run(m, [0.35, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.1] + [0.1] * 8)
    # 0.25 sits between exit (0.2) and enter (0.3): the alert holds; below 0.2 it resolves
    # after 30 s.
    assert got == [(0, 0, 1), (70, 1, 0)]


def test_flapping_risk_at_a_boundary_does_not_flap_the_alert() -> None:
    m = AlertMachine(AlertPolicy(resolve_for_s=30))
    got = _run(m, [0.31, 0.29, 0.31, 0.19, 0.31, 0.19, 0.31] * 4)
    assert got == [(0, 0, 1)]


@pytest.mark.parametrize("enter,exit_", [((0.3, 0.6, 0.9), (0.35, 0.45, 0.75)),
                                         ((0.6, 0.3, 0.9), (0.2, 0.25, 0.75))])
def test_policy_rejects_incoherent_thresholds(enter: tuple[float, ...],
                                              exit_: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        AlertPolicy(enter=enter, exit=exit_)  # type: ignore[arg-type]


def test_alert_store_tracks_an_episode_and_survives_a_restart(tmp_path: object) -> None:
    import pathlib

    db = pathlib.Path(str(tmp_path)) / "a.db"
    store = AlertStore(db)
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0))
    for now, r in [(0, 0.35), (5, 0.95), (10, 0.0)]:
        ts = m.step(Scope.GPU, np.array([r], np.float32), np.array([False]), now, ENTS)
        store.apply(ts, {})
    (a,) = store.find()
    assert (a.state, a.peak_level, a.level, a.resolved_at) == ("resolved", 3, 0, 10)
    assert [h["new_level"] for h in store.history(a.id)] == [1, 3, 0]
    ts = m.step(Scope.GPU, np.array([0.95], np.float32), np.array([True]), 20, ENTS)
    store.apply(ts, {})
    store.close()
    again = AlertStore(db)
    assert [x.level for x in again.open_alerts()] == [3]
    assert len(again.find(level=3)) == 2 and len(again.find(state="resolved")) == 1
