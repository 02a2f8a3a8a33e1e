"""Event-level matching on hand-built cases: windows, scope rules, several alerts for one
failure, per-level windows, the post-failure grace, benign traps and detection delay."""

from __future__ import annotations

from collectors.catalog import Scope
from models.evaluation.events import AlertRecord, Failure, Trap, truth_from_labels
from models.evaluation.matching import (
    DAY,
    HOUR,
    MINUTE,
    View,
    default_views,
    detection_delays,
    match,
    trap_hits,
)

T = 1_735_689_600.0 + 10 * DAY
GPU, LINK, PORT = "n1:gpu3", "n1:gpu3:nvlink2", "n1:mlx5_0:1"
WATCH, WARNING, CRITICAL, ANY = default_views()


def gpu_failure(t: float = T, onset: float | None = T - DAY, **kw: object) -> Failure:
    return Failure(t, GPU, Scope.GPU, "n1", "M1_hbm", onset, **kw)  # type: ignore[arg-type]


def alert(t: float, entity: str = GPU, scope: Scope = Scope.GPU, level: int = 1,
          prev: int = 0, node: str = "n1") -> AlertRecord:
    return AlertRecord(t, entity, scope, node, level, prev)


def test_alert_just_inside_the_window_is_a_hit() -> None:
    f = [gpu_failure()]
    for lead in (5 * MINUTE, 7 * DAY):
        m = match([alert(T - lead)], f, WATCH)
        assert m.first_alert == {0: T - lead} and m.false_alarms == []


def test_alert_just_outside_the_window_is_not_a_hit() -> None:
    f = [gpu_failure()]
    too_late = match([alert(T - 5 * MINUTE + 1)], f, WATCH)
    assert too_late.first_alert == {} and too_late.late == 1 and too_late.false_alarms == []
    too_early = match([alert(T - 7 * DAY - 1)], f, WATCH)
    assert too_early.first_alert == {} and len(too_early.false_alarms) == 1


def test_several_alerts_before_one_failure_count_once_earliest_gives_the_lead() -> None:
    f = [gpu_failure()]
    m = match([alert(T - 2 * HOUR), alert(T - 30 * HOUR), alert(T - 3 * HOUR, LINK, Scope.NVLINK)],
              f, WATCH)
    assert m.true_alerts == 3 and m.false_alarms == []
    assert m.lead_s(0, f) == 30 * HOUR


def test_scope_rules() -> None:
    before = T - 2 * HOUR
    link_failure = [Failure(T, LINK, Scope.NVLINK, "n1", "M3_nvlink", T - DAY)]
    # A GPU alert does not predict a failure of one of its links...
    assert len(match([alert(before)], link_failure, WATCH).false_alarms) == 1
    # ...a link alert predicts the failure of its GPU, an alert on another GPU does not.
    assert match([alert(before, LINK, Scope.NVLINK)], [gpu_failure()], WATCH).first_alert
    assert not match([alert(before, "n1:gpu4")], [gpu_failure()], WATCH).first_alert
    # A port failure needs that port; a node failure takes any entity of the node.
    port_failure = [Failure(T, PORT, Scope.IB_PORT, "n1", "M4_ib_link", T - DAY)]
    assert match([alert(before, PORT, Scope.IB_PORT)], port_failure, WATCH).first_alert
    assert not match([alert(before, "n1:mlx5_1:1", Scope.IB_PORT)], port_failure,
                     WATCH).first_alert
    node_failure = [Failure(T, "n1", Scope.NODE, "n1", "M7_unobservable")]
    assert match([alert(before, PORT, Scope.IB_PORT)], node_failure, WATCH).first_alert
    assert not match([alert(before, "n2:gpu0", node="n2")], node_failure, WATCH).first_alert


def test_per_level_windows() -> None:
    f = [gpu_failure()]
    warn_30h = [alert(T - 30 * HOUR, level=2)]
    assert match(warn_30h, f, WATCH).first_alert  # a level-2 alert is also a watch alert
    assert len(match(warn_30h, f, WARNING).false_alarms) == 1  # but 30 h is beyond 24 h
    crit_30min = [alert(T - 30 * MINUTE, level=3)]
    assert match(crit_30min, f, CRITICAL).first_alert
    assert match(crit_30min, f, WARNING).first_alert
    crit_2h = [alert(T - 2 * HOUR, level=3)]
    assert len(match(crit_2h, f, CRITICAL).false_alarms) == 1
    assert match([alert(T, level=3)], f, CRITICAL).first_alert  # critical allows lead 0
    assert match([alert(T - 2 * HOUR, level=1)], f, WARNING).alerts == 0  # level 1 only
    # An escalation 1 -> 3 crosses levels 2 and 3, not 1 (that was the earlier record).
    step = alert(T - 30 * MINUTE, level=3, prev=1)
    assert match([step], f, WATCH).alerts == 0 and match([step], f, CRITICAL).alerts == 1


def test_min_warning_is_configurable() -> None:
    f = [gpu_failure()]
    late = [alert(T - 2 * MINUTE)]
    assert not match(late, f, WATCH).first_alert
    assert match(late, f, default_views(min_warning_s=0)[0]).first_alert


def test_post_failure_grace() -> None:
    f = [gpu_failure()]
    after = match([alert(T + 2 * HOUR), alert(T + 3 * HOUR, LINK, Scope.NVLINK)], f, WATCH)
    assert after.post_failure == 2 and after.false_alarms == []
    assert len(match([alert(T + 25 * HOUR)], f, WATCH).false_alarms) == 1
    # A repair later than the 24 h grace extends it.
    repaired = [gpu_failure(repaired=T + 30 * HOUR)]
    assert match([alert(T + 28 * HOUR)], repaired, WATCH).post_failure == 1
    # An NVLink failure's fallout on its GPU (Xid 74) is not a false alarm either.
    link_failure = [Failure(T, LINK, Scope.NVLINK, "n1", "M3_nvlink", None)]
    assert match([alert(T + 60)], link_failure, WATCH).post_failure == 1


def test_detection_delay_of_an_abrupt_fault() -> None:
    f = [gpu_failure(onset=None), Failure(T, "n2:gpu0", Scope.GPU, "n2", "M2_gpu_hard")]
    delays = detection_delays([alert(T - HOUR), alert(T + 12), alert(T + 90, level=3)], f)
    assert delays == {0: 12.0}
    assert detection_delays([alert(T + 12), alert(T + 90, level=3)], f, level=3) == {0: 90.0}


def test_benign_trap_hits() -> None:
    traps = [Trap("sbe_carrier", GPU, Scope.GPU, "n1", T, T + DAY),
             Trap("telemetry_gap", "n2", Scope.NODE, "n2", T, T + 600),
             Trap("ib_corruption", PORT, Scope.IB_PORT, "n1", T, None)]
    alerts = [alert(T + 2 * HOUR, LINK, Scope.NVLINK),  # the carrier's GPU family alerted
              alert(T + 600 + 2 * HOUR, "n2:gpu0", node="n2")]  # after the gap + 1 h margin
    assert trap_hits(alerts, traps, run_end=T + 30 * DAY) == [True, False, False]
    assert trap_hits(alerts, traps, run_end=T + 30 * DAY, margin_s=3 * HOUR)[1]


def test_labels_from_simulator_dicts() -> None:
    labels = [
        {"kind": "failure", "time": T, "node": "n1", "entity": GPU, "scope": "gpu",
         "mode": "M1_hbm", "precursor_onset": T - DAY},
        {"kind": "repair", "time": T + 5 * HOUR, "node": "n1", "entity": GPU, "scope": "gpu",
         "action": "gpu_reset", "mode": "M1_hbm"},
        {"kind": "benign", "trap": "nvlink_blip", "node": "n1", "entity": LINK,
         "scope": "nvlink", "start": T, "end": T},
    ]
    truth = truth_from_labels(labels)
    assert truth.failures[0].repaired == T + 5 * HOUR and truth.failures[0].precursor
    assert truth.traps[0].scope is Scope.NVLINK and truth.ignored == 0


def test_views_follow_the_literature() -> None:
    assert [(v.name, v.level, v.min_lead_s, v.max_lead_s) for v in default_views()] == [
        ("watch", 1, 300.0, 7 * DAY), ("warning", 2, 300.0, DAY), ("critical", 3, 0.0, HOUR),
        ("any", 1, 0.0, 7 * DAY)]
    assert isinstance(WATCH, View)


def test_an_nvlink_failure_is_predicted_from_either_end_and_its_xids_are_fallout() -> None:
    peer = "n1:gpu5:nvlink2"
    failure = [Failure(T, LINK, Scope.NVLINK, "n1", "M3_nvlink", T - DAY, peer=peer)]
    m = match([alert(T - 3 * HOUR, peer, Scope.NVLINK)], failure, WATCH)
    assert m.first_alert == {0: T - 3 * HOUR}
    # Xid 74 lands on both GPUs right at the failure: fallout of it, not false alarms.
    both = match([alert(T, "n1:gpu3", Scope.GPU, 3), alert(T + 1, "n1:gpu5", Scope.GPU, 3)],
                 failure, WATCH)
    assert both.false_alarms == []
    label = {"kind": "failure", "time": T, "node": "n1", "entity": LINK, "scope": "nvlink",
             "mode": "M3_nvlink", "precursor_onset": None, "peer": peer}
    assert truth_from_labels([label]).failures[0].peer == peer
