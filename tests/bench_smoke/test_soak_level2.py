"""The soak's level-2 faults, short of the whole stack: the fake BMC read through the product's
`ipmi` source (the agent's own source, running the fake `ipmitool`) shows a supply failing, its
node's redundancy lost and a fan slowing below its lower critical speed; the fake nvidia-smi
shows a link at half width; and the level-2 rows (bench/soak_level2.py) fail on the defect
each exists for (an alert at level 3, on another entity, never mailed, a drain for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.soak_alertmanager import AmAlert, AmSample, Firing
from bench.soak_bmc import FAN_LCR, write_executable
from bench.soak_fleet import Fleet
from bench.soak_ledger import Push, level2_evidence
from bench.soak_level2 import budget_s, level2, no_drain
from bench.soak_mail import MailAlert, _listed
from bench.soak_plan import FAN_DECAY_S, Fault, Level2Fault, NodeSpec, Plan, build
from bench.soak_receiver import Received
from bench.soak_smi import main as smi_main
from bench.soak_stack import REPO
from collectors import registry
from collectors.lineprotocol import parse
from tests.bench_smoke.test_soak_storm import FakeApi

T0 = 1_800_000_000.0


def _read(fleet: Fleet, node: str, tmp: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """One read of the node's BMC by the product's ipmi source: (measurement, id) -> fields."""
    state = fleet.nodes[node]
    binary = tmp / node / "ipmitool"
    write_executable(binary, state.bmc_state, REPO)
    source = registry.get("ipmi").build(node, {"binary": str(binary), "timeout": 30.0})
    got = source.read()  # type: ignore[attr-defined]
    assert got.reachable, got.reason
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for p in got.points:
        key = (p.measurement, p.tags.get(p.measurement, ""))
        out.setdefault(key, {}).update(p.fields)
    return out


def test_the_fake_bmc_reads_through_the_ipmi_source(tmp_path: Path) -> None:
    fleet = Fleet(build(3, 16), tmp_path / "nodes")
    fleet.advance(T0)
    before = _read(fleet, "n01", tmp_path)
    assert {k for k in before if k[0] == "psu"} == {("psu", "1"), ("psu", "2")}
    assert {k for k in before if k[0] == "fan"} == {("fan", str(i)) for i in range(1, 7)}
    assert before[("psu", "2")]["psu_health"] == 0
    assert before[("node", "")]["psu_redundant"] == 1
    assert before[("fan", "3")]["fan_rpm_lower_critical"] == FAN_LCR
    # One source across the failure: its first read only sets the event log's cursor, the
    # failure's entries are new after it.
    binary = tmp_path / "n01" / "ipmitool"
    source = registry.get("ipmi").build("n01", {"binary": str(binary), "timeout": 30.0})
    assert source.read().reachable  # type: ignore[attr-defined]
    fleet.apply(Fault(T0 + 1, "psu_fail", "n01", unit="2"), T0 + 1)
    fleet.apply(Fault(T0 + 1, "fan_slowing", "n00", unit="3"), T0 + 1)
    fleet.advance(T0 + 2 + FAN_DECAY_S)
    got = source.read()  # type: ignore[attr-defined]
    fields = {(p.measurement, p.tags.get(p.measurement, "")): p.fields for p in got.points
              if p.measurement != "sel"}
    assert fields[("psu", "2")]["psu_health"] == 2
    assert fields[("psu", "1")]["psu_health"] == 0 and fields[("psu", "1")]["psu_output_w"] > 0
    assert fields[("node", "")]["psu_redundant"] == 0
    assert sorted(p.fields["code"] for p in got.points if p.measurement == "sel") == [2, 2]
    fans = _read(fleet, "n00", tmp_path)
    assert fans[("fan", "3")]["fan_rpm"] < FAN_LCR and fans[("fan", "3")]["fan_health"] == 2
    assert fans[("fan", "2")]["fan_health"] == 0


def test_the_fake_nvidia_smi_prints_the_narrowed_link(tmp_path: Path,
                                                       capsys: Any) -> None:
    fleet = Fleet(build(3, 16), tmp_path / "nodes")
    fleet.apply(Fault(T0, "pcie_narrow", "n00", gpu=0), T0)
    state = str(fleet.nodes["n00"].smi_state)
    assert smi_main(state, ["--query-gpu=index,pcie.link.width.current,pcie.link.width.max",
                            "--format=csv,noheader,nounits"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "0, 8, 16" and rows[1] == "1, 16, 16"


# ---- the verdicts ---------------------------------------------------------------------------

def _plan() -> Plan:
    p = Plan(180.0, 5.0, [NodeSpec(f"n0{i}", "smi", 4) for i in range(6)])
    p.level2_for_s = 45.0
    p.level2 = [Level2Fault("psu", "n01:psu2", "PsuFailureRisk", "psu_failed", "psu", unit="2"),
                Level2Fault("pcie", "n00:gpu0", "GpuFailureRisk", "pcie_width_low", "pcie",
                            hold_s=20.0)]
    return p


def _push(at: float, lines: list[str]) -> Push:
    return Push(T0 + at, 204, "agent", "n01", parse(lines, max_lines=None,
                                                    max_bytes=None).points, 0)


def _pushes() -> list[Push]:
    out = []
    for t in range(100, 180, 5):
        ns = int((T0 + t) * 1e9)
        out.append(_push(t + 0.5, [
            f"psu,host=n01,psu=2 psu_health={2 if t >= 110 else 0}i,psu_state=0i {ns}",
            f"gpu,host=n00,gpu=0 pcie_link_width={8 if t >= 120 else 16}i,"
            f"pcie_link_width_max=16i {ns}"]))
    return out


RULES = {"PsuFailureRisk": "psu_failed", "GpuFailureRisk": "pcie_width_low"}


def _alert(i: int, entity: str, name: str, peak: int, started: float,
           rule: str = "") -> dict[str, Any]:
    return {"id": i, "entity": entity, "alertname": name, "peak_level": peak,
            "fingerprint": f"fp{i}", "started_at": T0 + started, "resolved_at": None,
            "level": peak, "explanation": [{"rule": rule or RULES[name], "hard": True}]}


def _am(at: float, fps: list[tuple[int, str, str]]) -> AmSample:
    return AmSample(T0 + at, 1, tuple(Firing(i, fp, "x", e, 2, T0) for i, fp, e in fps),
                    {fp: [AmAlert("active", 2, T0 + at + 30)] for _, fp, _ in fps})


def test_evidence_waits_for_the_hold_of_the_width() -> None:
    ev = level2_evidence(_pushes(), _plan().level2[1])
    assert ev.happened_at == T0 + 120.5 and ev.complete_at == T0 + 140.5
    ev = level2_evidence(_pushes(), _plan().level2[0])
    assert ev.happened_at == ev.complete_at == T0 + 110.5


def test_level2_in_time_delivered_and_not_drained_holds() -> None:
    alerts = [_alert(1, "n01:psu2", "PsuFailureRisk", 2, 110.5),
              _alert(2, "n00:gpu0", "GpuFailureRisk", 2, 120.5)]
    api = FakeApi(alerts, {1: [(T0 + 111, 1), (T0 + 160, 2)], 2: [(T0 + 121, 1),
                                                                  (T0 + 190, 2)]})
    am = [_am(165, [(1, "fp1", "n01:psu2")]), _am(195, [(1, "fp1", "n01:psu2"),
                                                        (2, "fp2", "n00:gpu0")])]
    mail = [MailAlert(T0 + 162, "firing", "n01:psu2", 2),
            MailAlert(T0 + 192, "firing", "n00:gpu0", 2)]
    rows, raised = level2(api, _plan(), _pushes(), {1: T0}, am, None, mail, T0)
    assert [(r.ok, r.value) for r in rows] == [(True, "49.5 s"), (True, "1 mail, 2 probes"),
                                               (True, "49.5 s"), (True, "1 mail, 1 probes")]
    assert budget_s(_plan()) == 61.0
    drain = Received(T0 + 170, "/remediate", "w1", {"op": "drain", "node": "n03",
                                                     "alert_id": 9, "fingerprint": "fp9"})
    assert no_drain([drain], raised).ok


def test_each_defect_fails_its_row() -> None:
    # Level 3, not 2; too late; another supply of the node alerting; never mailed; drained.
    # Another GPU's alert for another reason (the silent GPU) is not the link's.
    alerts = [_alert(1, "n01:psu2", "PsuFailureRisk", 3, 110.5),
              _alert(2, "n00:gpu0", "GpuFailureRisk", 2, 120.5),
              _alert(3, "n01:psu1", "PsuFailureRisk", 2, 115.0),
              _alert(4, "n00:gpu1", "GpuFailureRisk", 3, 115.0, rule="stale")]
    api = FakeApi(alerts, {1: [(T0 + 111, 2), (T0 + 150, 3)], 2: [(T0 + 250, 2)],
                           3: [(T0 + 120, 2)]})
    rows, raised = level2(api, _plan(), _pushes(), {1: T0}, [_am(260, [(2, "fp2", "n00:gpu0")])],
                          None, [], T0)
    psu, psu_sent, pcie, pcie_sent = rows
    assert not psu.ok and "peak level 3" in psu.detail and "also on n01:psu1" in psu.detail
    assert not pcie.ok and pcie.value == "109.5 s" and "also on" not in pcie.detail
    assert not psu_sent.ok and not pcie_sent.ok and "no mail" in pcie_sent.detail
    drain = Received(T0 + 170, "/remediate", "w1", {"op": "drain", "node": "n01",
                                                     "alert_id": 1, "fingerprint": "fp1"})
    row = no_drain([drain], raised)
    assert not row.ok and "n01" in row.detail


def test_an_alert_another_rule_raised_is_not_the_fault_s() -> None:
    api = FakeApi([_alert(1, "n01:psu2", "PsuFailureRisk", 2, 110.5, rule="model")],
                  {1: [(T0 + 111, 2)]})
    p = _plan()
    p.level2 = p.level2[:1]
    rows, _ = level2(api, p, _pushes(), {1: T0}, [], None, [], T0)
    assert not rows[0].ok and "does not name psu_failed" in rows[0].detail


def test_a_restart_counts_the_for_duration_from_its_first_tick() -> None:
    api = FakeApi([_alert(1, "n01:psu2", "PsuFailureRisk", 2, 110.5)],
                  {1: [(T0 + 111, 1), (T0 + 175, 2)]})
    p = _plan()
    p.level2 = p.level2[:1]
    rows, _ = level2(api, p, _pushes(), {1: T0, 2: T0 + 130}, [], None, [], T0)
    assert rows[0].ok and rows[0].value == "45.0 s" and "after a restart at +130 s" in \
        rows[0].detail


def test_the_mail_text_gives_each_alert_its_section_entity_and_level() -> None:
    text = ("NodeAtRisk n01\n\nFiring (1)\n----------\n* power supply\n    entity: n01:psu2\n"
            "    node: n01\n    level: 2 (warning)\n    risk: 0.70\n\nResolved (1)\n"
            "------------\n* fan\n    entity: n00:fan3\n    node: n00\n    level: 2 (warning)\n")
    assert _listed(5.0, text) == [MailAlert(5.0, "firing", "n01:psu2", 2),
                                  MailAlert(5.0, "resolved", "n00:fan3", 2)]
