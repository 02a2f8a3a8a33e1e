"""The storm phase's invariants (bench/soak_storm.py) judged on made-up observations: each row
must fail on the defect it exists for (an alert that left Alertmanager while firing, a hard
fault the pager never heard of, a delivery column that says `sent` for what never arrived),
not only pass on a good run; the soak's own run (test_soak.py) shows them on the real stack."""

from __future__ import annotations

from typing import Any

from bench.soak_alertmanager import AmAlert, AmSample, Firing
from bench.soak_ledger import Push
from bench.soak_plan import HardFailure, NodeSpec, Plan
from bench.soak_receiver import Received
from bench.soak_storm import (
    deliveries,
    hard_faults_paged,
    in_alertmanager,
    lag_s,
    page_budget_s,
)
from bench.soak_verdict import Api, pages
from collectors.lineprotocol import parse
from service.notify.receivers.webhook import rfc3339

T0 = 1_800_000_000.0
PID = 4242


class FakeApi(Api):
    """The service's API as the verdicts read it, from lists."""

    def __init__(self, alerts: list[dict[str, Any]],
                 history: dict[int, list[tuple[float, int]]] | None = None) -> None:
        super().__init__("http://127.0.0.1:9")
        self._alerts, self._history = alerts, history or {}

    def alerts(self, **params: Any) -> list[dict[str, Any]]:
        return list(self._alerts)

    def history(self, alert_id: int) -> list[dict[str, Any]]:
        return [{"at": at, "old_level": 0, "new_level": lv}
                for at, lv in self._history.get(alert_id, [])]


def plan() -> Plan:
    p = Plan(180.0, 5.0, [NodeSpec(f"n0{i}", "smi", 4) for i in range(6)])
    p.failures = [HardFailure("DBE", "n01:gpu1", "dbe"), HardFailure("hot", "n00:gpu2", "hot")]
    return p


FP = "00c0ffee00c0ffee"


def sample(at: float, level: int, am: list[AmAlert], pid: int = PID) -> AmSample:
    return AmSample(T0 + at, pid, (Firing(7, FP, "GpuFailureRisk", "n01:gpu1", level, T0 + 10),),
                    {FP: am} if am else {})


def active(level: int, ends: float) -> AmAlert:
    return AmAlert("active", level, T0 + ends)


def test_an_alert_gone_from_alertmanager_while_firing_fails_both_rows() -> None:
    api = FakeApi([], {7: [(T0 + 10, 2), (T0 + 40, 3)]})
    samples = [sample(30, 2, [active(2, 60)]),  # level 2 and there
               sample(45, 3, [active(2, 60)]),  # just at level 3: within the post's delay
               sample(60, 3, [active(3, 90)]),  # there at level 3
               sample(100, 3, [])]  # expired there while firing
    level3, gone = in_alertmanager(api, plan(), samples, {PID: T0}, T0)
    assert (level3.ok, level3.value) == (False, "1 missing of 2")
    assert "+100 s: absent" in level3.detail
    assert (gone.ok, gone.value) == (False, "1 alerts")
    assert "resolved there: GpuFailureRisk n01:gpu1" in gone.detail


def test_present_throughout_holds_and_a_restart_is_given_its_first_tick() -> None:
    api = FakeApi([], {7: [(T0 + 10, 3)]})
    samples = [sample(30, 3, [active(3, 60)]), sample(40, 3, [AmAlert("suppressed", 3, T0 + 70,
                                                                      ("silence-1",))]),
               # a new life of the service that has not scored yet: Alertmanager let it expire
               sample(80, 3, [], pid=PID + 1), sample(95, 3, [active(3, 120)], pid=PID + 1)]
    # the new life scored first at +80: judged again from +80 + lag_s (+92)
    assert lag_s(plan()) == 12.0
    level3, gone = in_alertmanager(api, plan(), samples, {PID: T0, PID + 1: T0 + 80}, T0)
    assert level3.ok and level3.value == "0 missing of 3", level3
    assert "1 within a restart's first tick" in level3.detail
    assert gone.ok, gone


def test_nothing_judged_is_not_a_pass() -> None:
    level3, gone = in_alertmanager(FakeApi([]), plan(), [], {}, T0)
    assert not level3.ok and not gone.ok


def push(at: float, line: str) -> Push:
    return Push(T0 + at, 204, "agent", "n", parse([line], max_lines=None, max_bytes=None).points,
                0)


def note(at: float, *alerts: dict[str, Any]) -> Received:
    return Received(T0 + at, "/notify", f"msg_{at}", {"alerts": list(alerts)})


def fired(entity: str, level: int = 3, **extra: Any) -> dict[str, Any]:
    return {"status": "firing", "labels": {"alertname": "GpuFailureRisk", "entity": entity},
            "level": level, **extra}


def storm_page(*explanation: dict[str, Any]) -> dict[str, Any]:
    return {"status": "firing", "labels": {"alertname": "FleetStorm", "entity": "fleet"},
            "level": 3, "explanation": list(explanation)}


EVIDENCE = [push(50, f"gpu,host=n01,gpu=1 ecc_dbe_volatile=1i {int((T0 + 49) * 1e9)}"),
            push(60, f"gpu,host=n00,gpu=2 gpu_temp=91.5 {int((T0 + 59) * 1e9)}")]


def test_every_hard_fault_paged_own_or_listed_hard_in_the_storm_page() -> None:
    notes = [note(55, fired("n01:gpu1")),
             note(65, storm_page({"rule": "near_shutdown", "signal": "n00:gpu2", "hard": True}))]
    got = hard_faults_paged(plan(), notes, EVIDENCE, 30.0)
    assert got.ok and got.value == "2 of 2", got
    assert "n00:gpu2: in the storm page (entity)" in got.detail


def test_a_hard_fault_the_pager_never_heard_of_fails() -> None:
    notes = [note(40, fired("n01:gpu1")),  # before its failure reached the service
             note(56, fired("n01:gpu1", level=2)),  # after, but not a page
             note(50 + page_budget_s(plan()) + 1, fired("n01:gpu1")),  # held back: too late
             note(65, storm_page({"rule": "near_shutdown", "signal": "n00:gpu2", "hard": False}),
                  {**fired("n00:gpu2"), "status": "resolved"})]
    got = hard_faults_paged(plan(), notes, EVIDENCE, 30.0)
    assert not got.ok and got.value == "0 of 2"
    assert "n01:gpu1 (dbe, paged only +24 s)" in got.detail and "n00:gpu2 (hot)" in got.detail


def alert(fp: str, rows: list[dict[str, Any]] | None, state: str = "firing",
          level: int = 3) -> dict[str, Any]:
    out = {"id": 1, "alertname": "GpuFailureRisk", "entity": f"n01:{fp}", "fingerprint": fp,
           "started_at": T0 + 10, "state": state, "level": level}
    if rows is not None:
        out["deliveries"] = rows
    return out


def paged(fp: str, at: float, level: int, status: str = "firing") -> Received:
    return note(at, {**fired(f"n01:{fp}", level), "fingerprint": fp, "status": status,
                     "startsAt": rfc3339(T0 + 10)})


SENT = {"receiver": "pager", "state": "sent", "level_sent": 3, "sent_at": rfc3339(T0 + 31)}


def column(alerts: list[dict[str, Any]], notes: list[Received],
           am: AmSample | None = None) -> Any:
    return deliveries(FakeApi(alerts), lambda: notes, lambda: am)


def test_the_delivery_column_agrees_with_what_the_pager_got() -> None:
    got = column([alert("a", [SENT]), alert("b", [{**SENT, "state": "muted"}]),
                  alert("c", [{"receiver": "pager", "state": "sent"}], state="resolved"),
                  alert("d", [{"receiver": "pager", "state": "sent"}], state="resolved")],
                 [paged("a", 30, 3), paged("c", 30, 3), paged("c", 60, 3, "resolved")])
    # b: muted, never sent; d: resolved, never paged, so nothing owed
    assert got.ok and got.value == "0 of 3", got


def test_a_delivery_column_that_says_sent_for_what_never_arrived_fails() -> None:
    got = column([alert("a", [SENT]), alert("b", [SENT]),
                  alert("c", [{"receiver": "pager", "state": "sent"}], state="resolved"),
                  alert("e", [SENT])],
                 [paged("a", 30, 2), paged("c", 30, 3), paged("e", 70, 3)])
    assert not got.ok and got.value == "4 of 4", got
    assert "a: pager says sent at level 3, received at [2]" in got.detail
    assert "b: pager says sent, never received" in got.detail
    assert "c: pager says nothing owed, its resolve never received" in got.detail
    assert "e: pager says sent at level 3 at" in got.detail and "+39 s from it" in got.detail


def test_the_alertmanager_row_against_alertmanager() -> None:
    sent = {"receiver": "am", "state": "sent", "level_sent": 3, "sent_at": rfc3339(T0 + 12)}
    now = AmSample(T0 + 100, PID, (Firing(1, "a", "GpuFailureRisk", "n01:a", 3, T0 + 10),),
                   {"a": [active(1, 120)]})
    got = column([alert("a", [sent])], [], now)
    assert not got.ok and "am sent at level 3, Alertmanager has active@1" in got.detail
    now = AmSample(T0 + 100, PID, now.firing, {"a": [active(3, 120)]})
    assert column([alert("a", [sent])], [], now).ok


def test_a_delivery_column_missing_from_the_api_fails_as_not_available() -> None:
    got = column([alert("a", None)], [paged("a", 30, 3)])
    assert not got.ok and got.value == "not available"


def test_a_storm_page_that_gains_a_hard_fault_is_news_not_a_duplicate() -> None:
    def storm_msg(at: float, *hard: str) -> Received:
        a = {**storm_page(*({"rule": "dbe", "signal": f"{e}: dbe", "hard": True} for e in hard),
                          {"rule": "FleetStorm", "signal": f"{at} of 6", "hard": False}),
             "fingerprint": "f", "startsAt": rfc3339(T0)}
        return Received(T0 + at, "/notify", f"msg_{at}", {"groupKey": "0.1:{node='*'}",
                                                           "reason": "update", "alerts": [a]})

    news = [storm_msg(10, "n01:gpu1"), storm_msg(20, "n01:gpu1", "n00:gpu2")]
    assert pages(FakeApi([]), plan(), news, T0 + 100)[0].value == "0"
    again = [*news, storm_msg(30, "n00:gpu2", "n01:gpu1")]  # only a soft entry changed
    assert pages(FakeApi([]), plan(), again, T0 + 100)[0].value == "1"
