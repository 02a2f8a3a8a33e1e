"""A GPU that falls off the bus: its Xid 79 arrives 90 s late (an agent draining its spool),
and the GPU is silent from then on while the rest of its node keeps reporting. The hard fault
must alert at level 3 within two ticks of its evidence arriving, and the silence itself is a
GpuMissing alert rather than a frozen level."""

from __future__ import annotations

from pathlib import Path

from collectors.catalog import Scope
from collectors.frames import Batch
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.remediation.wiring import AlertRecheck
from service.settings import Settings
from service.stages.alert_machine import Transition
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import MISSING
from tests.pipeline.builders import T0, Rounds

STEP = 5.0
GONE = ("n1:gpu3", "n1:gpu3:nvlink0", "n1:gpu3:nvlink1")


def _pipeline(tmp: Path) -> Pipeline:
    s = Settings(storage={"data_dir": tmp},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    return build_pipeline(s, Wiring(notifiers=(), remediate=False))


def _open(p: Pipeline) -> dict[tuple[str, str], int]:
    return {(a.name, a.entity): a.level for a in p.alerts.open_alerts()}


def _xid(ts: float, code: int = 79) -> Batch:
    b = Batch()
    b.events.add("n1:gpu3", ts, "xid", float(code))
    return b


def test_late_xid_79_from_a_silent_gpu_pages(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=8)
    t = T0
    for k in range(120):  # ten healthy minutes
        t = T0 + k * STEP
        p.process(r.batch(t), t)
    fell = t + STEP  # the GPU falls off the bus: silent from here on
    arrived = fell + 90
    seen_missing = None
    t = fell
    while t < arrived:
        p.process(r.batch(t, missing=GONE), t)
        if seen_missing is None and (MISSING, "n1:gpu3") in _open(p):
            seen_missing = t
        t += STEP
    # silence alone, within the stale limit (60 s) and a tick
    assert seen_missing is not None and seen_missing - fell <= 60 + 2 * STEP
    assert _open(p)[MISSING, "n1:gpu3"] == 2
    assert ("GpuFailureRisk", "n1:gpu3") not in _open(p)
    p.ingest(_xid(fell), arrived)  # the spool drains: the Xid's own time is 90 s ago
    levels = []
    for k in range(2):
        t = arrived + k * STEP
        p.process(r.batch(t, missing=GONE), t)
        levels.append(_open(p).get(("GpuFailureRisk", "n1:gpu3"), 0))
    assert 3 in levels, levels
    # the rest of the node is untouched, and a resend of the same Xid is stored once
    assert _open(p).get(("GpuFailureRisk", "n1:gpu2"), 0) == 0
    p.ingest(_xid(fell), t)
    assert sum(1 for e in p.events.since(0) if e.entity == "n1:gpu3") == 1


def test_gpu_missing_resolves_when_it_reports_again(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=8)
    t = T0
    for k in range(60):
        t = T0 + k * STEP
        p.process(r.batch(t), t)
    for _ in range(20):
        t += STEP
        p.process(r.batch(t, missing=GONE), t)
    assert _open(p).get((MISSING, "n1:gpu3")) == 2
    for _ in range(2):
        t += STEP
        p.process(r.batch(t), t)
    assert (MISSING, "n1:gpu3") not in _open(p)
    # a whole node going silent is NodeNoData, not one GpuMissing per GPU
    node = tuple(e.key for s in r.tables.values() for e in s.entities if e.node == "n0")
    for _ in range(20):
        t += STEP
        p.process(r.batch(t, missing=node), t)
    opened = _open(p)
    assert opened.get(("NodeNoData", "n0")) == 2
    assert not any(name == MISSING for name, _ in opened)


def test_no_data_alerts_wait_for_a_first_look_after_start(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=8)
    # a start an hour after the newest data it restored (a replayed history, several steps:
    # a name seen once would raise nothing): stale until agents report again
    for k in (2, 1, 0):
        p.ingest(r.batch(T0 - 5 * k), T0)
    t = T0 + 3600
    p.tick(t)
    assert not [k for k in _open(p) if k[0] in ("NodeNoData", MISSING)]
    p.tick(t + 65)  # nobody has reported for a full stale limit since the start
    assert {k for k in _open(p) if k[0] == "NodeNoData"} == {("NodeNoData", "n0"),
                                                             ("NodeNoData", "n1")}


def test_recheck_acts_on_a_hard_fault_of_a_silent_gpu(tmp_path: Path) -> None:
    p = _pipeline(tmp_path)
    soft = Transition(Scope.GPU, 4, "n1:gpu4", "n1", 0, 3, T0, 0.95)
    firm = Transition(Scope.GPU, 3, "n1:gpu3", "n1", 0, 3, T0, 1.0, hard=True,
                      corroborated=True)
    done = dict((t.entity, a) for t, a in p.alerts.apply([soft, firm], {}))
    for key in done:
        p.alerts.set_flags(key, flapping=False, stale=True, at=T0 + 90)
    check = AlertRecheck(p.alerts)
    a: Alert = done["n1:gpu3"]
    assert check.recheck("n1", a.fingerprint, T0 + 90) is None
    assert check.recheck("n1", done["n1:gpu4"].fingerprint, T0 + 90) == \
        "the entity's telemetry is stale"


def test_an_alert_stored_for_a_name_now_refused_does_not_stop_a_restart(
        tmp_path: Path) -> None:
    p = _pipeline(tmp_path)  # an older version stored an alert for a hostlist "host"
    p.alerts.apply([Transition(Scope.GPU, 0, "gpu[1-2]:gpu0", "gpu[1-2]", 0, 3, T0, 1.0)], {})
    p.close()
    again = _pipeline(tmp_path)
    assert [a.entity for a in again.alerts.open_alerts()] == ["gpu[1-2]:gpu0"]
    again.close()
