import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from service.stages.alert_machine import AlertMachine, AlertPolicy
from service.stages.alert_store import AlertStore

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
    m = AlertMachine(AlertPolicy(for_s=(0, 20, 10), long_window_s=0))
    # Level 1 at once; level 2 only after risk held 20 s; level 3 after 10 s above 0.9.
    got = _run(m, [0.35, 0.65, 0.65, 0.65, 0.65, 0.65, 0.95, 0.95, 0.95])
    assert got == [(0, 0, 1), (25, 1, 2), (40, 2, 3)]


def test_a_spike_shorter_than_the_for_duration_does_not_escalate() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 20, 10), long_window_s=0))
    assert _run(m, [0.65, 0.65, 0.1, 0.65, 0.1]) == [(0, 0, 1)]


def test_hard_rules_page_at_once() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 120, 60)))
    assert _run(m, [1.0], hard=True) == [(0, 0, 3)]


def test_hysteresis_and_resolve_delay() -> None:
    m = AlertMachine(AlertPolicy(resolve_for_s=30, dwell_s=(0, 0, 0)))
    got = _run(m, [0.35, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.1] + [0.1] * 8)
    # 0.25 sits between exit (0.2) and enter (0.3): the alert holds; below 0.2 it resolves
    # after 30 s.
    assert got == [(0, 0, 1), (70, 1, 0)]


def test_flapping_risk_at_a_boundary_does_not_flap_the_alert() -> None:
    m = AlertMachine(AlertPolicy(resolve_for_s=30, dwell_s=(0, 0, 0)))
    got = _run(m, [0.31, 0.29, 0.31, 0.19, 0.31, 0.19, 0.31] * 4)
    assert got == [(0, 0, 1)]


@pytest.mark.parametrize("enter,exit_", [((0.3, 0.6, 0.9), (0.35, 0.45, 0.75)),
                                         ((0.6, 0.3, 0.9), (0.2, 0.25, 0.75))])
def test_policy_rejects_incoherent_thresholds(enter: tuple[float, ...],
                                              exit_: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        AlertPolicy(enter=enter, exit=exit_)  # type: ignore[arg-type]


def test_alert_store_tracks_an_episode_and_survives_a_restart(state_target: str) -> None:
    db = state_target  # the SQLite file, then a PostgreSQL schema
    store = AlertStore(db)
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0, long_window_s=0,
                                  dwell_s=(0, 0, 0)))
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
    again.close()


def test_level_3_needs_the_long_window_to_agree() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 10), long_window_s=600, long_enter=0.75,
                                 dwell_s=(0, 0, 0)))
    # 0.95 from t=0: the short window is met at 10 s, the weighted mean (tau 300 s) needs
    # 300 * ln(0.95 / 0.2) = 467 s to reach 0.75.
    got = _run(m, [0.95] * 120)
    assert [(t, o, n) for t, o, n in got if n == 3] == [(470.0, 2, 3)]
    assert got[0] == (0.0, 0, 2)


def test_a_short_burst_never_pages_without_the_long_window() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 10), long_window_s=900, dwell_s=(0, 0, 0),
                                 resolve_for_s=0))
    got = _run(m, [0.95] * 12 + [0.1] * 12)  # one minute of near-certainty
    assert max(n for _, _, n in got) == 2


def test_minimum_dwell_holds_a_level() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0, dwell_s=(0, 60, 0)))
    got = _run(m, [0.65] + [0.1] * 20)
    assert got == [(0.0, 0, 2), (60.0, 2, 0)]


def test_flapping_caps_the_level_below_a_page_and_clears() -> None:
    pol = AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0, dwell_s=(0, 0, 0), long_window_s=0,
                      flap_window_s=100, flap_enter=4, flap_exit=1)
    m = AlertMachine(pol)
    hard = np.array([True])
    seen: list[tuple[float, int]] = []
    flags: list[bool] = []
    for i, r in enumerate([0.95, 0.0] * 4 + [0.0] * 30 + [0.95]):
        ts = m.step(Scope.GPU, np.array([r], np.float32), hard, i * 5.0, ENTS)
        seen += [(t.at, t.new) for t in ts]
        flags += [f.flapping for f in m.flag_changes]
    # Four changes in 100 s make it flapping: the next rise stops at level 2.
    assert seen[:4] == [(0.0, 3), (5.0, 0), (10.0, 3), (15.0, 0)]
    assert seen[4] == (20.0, 2)
    # Long quiet clears the flag; the final certainty pages again.
    assert flags == [True, False]
    assert seen[-1][1] == 3


def test_stale_telemetry_freezes_the_level_and_is_its_own_state() -> None:
    from service.stages.alert_machine import AlertState

    m = AlertMachine(AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0, dwell_s=(0, 0, 0),
                                 long_window_s=0, stale_after_s=15))
    one = np.array([False])
    seen = np.array([0.0])
    assert [t.new for t in m.step(Scope.GPU, np.array([0.95], np.float32), one, 0.0, ENTS,
                                  last_seen=seen)] == [3]
    # Risk falls, but the data is 20 s old: no resolve.
    assert m.step(Scope.GPU, np.array([0.0], np.float32), one, 20.0, ENTS, last_seen=seen) == []
    assert m.states(Scope.GPU)[0] == AlertState.NODATA
    assert [f.stale for f in m.flag_changes] == [True]
    ts = m.step(Scope.GPU, np.array([0.0], np.float32), one, 25.0, ENTS,
                last_seen=np.array([25.0]))
    assert [t.new for t in ts] == [0] and [f.stale for f in m.flag_changes] == [False]


def test_corroboration_needs_a_hard_rule_or_a_confident_model() -> None:
    m = AlertMachine(AlertPolicy(for_s=(0, 0, 0), long_window_s=0))
    two = [Entity.gpu("n0", 0), Entity.gpu("n0", 1)]
    ts = m.step(Scope.GPU, np.array([0.95, 0.95], np.float32), np.array([False, False]), 0.0,
                two, confidence=np.array([0.5, 0.93], np.float32))
    assert [(t.new, t.corroborated) for t in ts] == [(3, False), (3, True)]
