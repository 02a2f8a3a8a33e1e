"""IpmiCollector against a real BMC: OpenIPMI's ipmi_sim on a loopback port (tests/collectors/
ipmi/bmc_sim.py), read over RMCP+ by Debian's ipmitool through our runner. Readings change
during the test through the simulator's console; a fan going below critical, a supply failure
and lost redundancy show in the next read's points, with their new SEL entries as events.
The password never appears in argv, a reason or a log."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.ipmi import IpmiCollector, Target
from tests.collectors.ipmi.bmc_sim import (
    ENV,
    FAILURE,
    FAN1,
    IPMI_SIM,
    IPMITOOL,
    MISSING,
    PASSWORD,
    PS1,
    PS_REDUNDANCY,
    REDUNDANCY_LOST,
    SDRCOMP,
    USER,
    IpmiSim,
    by_sensor,
    sel_events,
)
from tests.collectors.ipmi.bmc_sim import (
    target as sim_target,
)
from tests.notify.receivers.servers import LOOPBACK


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[IpmiSim]:
    if IPMI_SIM is None or SDRCOMP is None or IPMITOOL is None:
        pytest.skip(MISSING)
    bmc = IpmiSim(tmp_path / "bmc")
    bmc.start()
    yield bmc
    bmc.stop()


def test_reads_the_bmc_and_sees_faults_appear(sim: IpmiSim,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, PASSWORD)
    c = IpmiCollector(sim_target(sim), host="gpu-node-7", timeout=30)
    first = c.read()
    assert first.reachable and c.status.up, first.reason
    by = by_sensor(first)
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 0}
    assert by["psu", "2"] == {"psu_state": 0, "psu_health": 0}
    assert by["fan", "1"] == {"fan_rpm": 5400.0, "fan_health": 0, "fan_rpm_lower_critical": 800.0}
    assert by["fan", "2"] == {"fan_rpm": 5200.0, "fan_health": 0, "fan_rpm_lower_critical": 800.0}
    assert by["node", ""] == {"inlet_temp_c": 24.0, "psu_redundant": 1, "bmc_reachable": 1}
    assert sel_events(first) == []  # the log's history is not news
    assert all(p.tags["host"] == "gpu-node-7" for p in first.points)

    sim.set_value(FAN1, 5)  # 500 RPM: below lower non-critical and lower critical
    sim.set_bit(PS1, FAILURE, 1)
    sim.set_only_bit(PS_REDUNDANCY, REDUNDANCY_LOST)
    second = c.read()
    by = by_sensor(second)
    assert by["fan", "1"]["fan_rpm"] == 500.0 and by["fan", "1"]["fan_health"] == 2
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 2}
    assert by["psu", "2"]["psu_health"] == 0
    assert by["node", ""]["psu_redundant"] == 0
    # Lower non-critical (1), lower critical (2), failure detected (2), "Fully Redundant"
    # deasserted (no event), redundancy lost (2).
    assert [p.fields["code"] for p in sel_events(second)] == [1, 2, 2, 2]
    assert any("Fully Redundant (deasserted)" in r.reason for r in second.rejected)

    third = c.read()  # nothing changed: `sel info` says so and the log is not listed again
    assert sel_events(third) == [] and by_sensor(third)["fan", "1"]["fan_health"] == 2
    sim.set_value(FAN1, 54)
    fourth = c.read()
    assert by_sensor(fourth)["fan", "1"] == {"fan_rpm": 5400.0, "fan_health": 0,
                                      "fan_rpm_lower_critical": 800.0}
    assert sel_events(fourth) == []  # recoveries are deassertions, not events


def test_password_from_a_file(sim: IpmiSim, tmp_path: Path) -> None:
    passfile = tmp_path / "bmc.pass"
    passfile.write_text(PASSWORD + "\n")
    passfile.chmod(0o600)
    target = sim_target(sim, password_file=passfile)
    assert PASSWORD not in " ".join(target.argv("sdr", "elist"))
    assert target.env() is None
    got = IpmiCollector(target, host="n1", timeout=30).read()
    assert got.reachable, got.reason
    assert by_sensor(got)["node", ""]["bmc_reachable"] == 1


def test_a_wrong_password_is_unreachable_and_never_shown(
        sim: IpmiSim, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    wrong = "not-the-pw-93kd"
    monkeypatch.setenv(ENV, wrong)
    target = sim_target(sim)
    assert all(wrong not in a for a in target.argv("sdr", "elist"))
    c = IpmiCollector(target, host="n1", timeout=30)
    with caplog.at_level(logging.DEBUG):
        got = c.read()
    assert not got.reachable and not c.status.up
    assert [(p.measurement, p.fields) for p in got.points] == [("node", {"bmc_reachable": 0})]
    assert "exited with status" in got.reason and "127.0.0.1" in got.reason
    assert wrong not in got.reason and wrong not in caplog.text and PASSWORD not in caplog.text


def test_a_silent_bmc_times_out_and_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    if IPMITOOL is None:
        pytest.skip(MISSING)
    monkeypatch.setenv(ENV, "whatever")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:  # takes datagrams, answers none
        hole.bind((LOOPBACK, 0))
        c = IpmiCollector(Target(bmc=LOOPBACK, user=USER, port=hole.getsockname()[1],
                                 password_env=ENV), host="n1", timeout=1.5)
        got = c.read()
    assert not got.reachable and "timed out" in got.reason and "killed" in got.reason
    assert got.points[0].fields == {"bmc_reachable": 0}


def test_a_missing_password_variable_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    got = IpmiCollector(Target(bmc="bmc-7.mgmt", user=USER, password_env=ENV), host="n1").read()
    assert not got.reachable and got.reason == f"{ENV} is not set: no password for BMC bmc-7.mgmt"


@pytest.mark.parametrize(("kw", "why"), [
    ({"bmc": "-oProxyCommand=x"}, "starts with '-'"),
    ({"bmc": "a b"}, "holds characters"),
    ({"bmc": "bmc1", "user": "-U"}, "BMC user"),
    ({"bmc": "bmc1", "user": "admin", "interface": "open"}, "interface"),
    ({"bmc": "bmc1", "user": "admin", "port": 0}, "port"),
    ({"bmc": "bmc1", "user": "admin", "password_env": "A B"}, "password_env"),
])
def test_bad_targets_never_reach_argv(kw: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Target(**kw)  # type: ignore[arg-type]


def test_in_band_argv() -> None:
    assert Target().argv("sdr", "elist") == ["ipmitool", "-I", "open", "sdr", "elist"]
    assert Target().env() is None
