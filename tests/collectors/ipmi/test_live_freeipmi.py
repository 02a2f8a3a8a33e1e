"""IpmiCollector with tool=freeipmi against the same real BMC as the ipmitool test: OpenIPMI's
ipmi_sim on a loopback port, read over RMCP+ (`-D LAN_2_0 -h 127.0.0.1:PORT`) by Debian's
freeipmi-tools (`ipmi-sensors`, `ipmi-sel`). The readings must be the ones the ipmitool path
gives for the same simulator, before and after a fan falls below critical, a supply fails and
redundancy is lost.

ipmi_sim needs freeipmi's `opensesspriv` workaround (freeipmi answers "privilege level cannot be
obtained for this user" without it): ipmi_sim hashes the session keys with the privilege of the
Open Session request rather than RAKP 1's, the quirk that flag exists for (ipmi-sensors(8),
WORKAROUNDS). The password reaches freeipmi only through a config file, never argv."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.ipmi import IpmiCollector, Target
from collectors.process import run_process
from tests.collectors.ipmi.bmc_sim import (
    ENV,
    FAILURE,
    FAN1,
    IPMI_SIM,
    MISSING,
    PASSWORD,
    PS1,
    PS_REDUNDANCY,
    REDUNDANCY_LOST,
    SDRCOMP,
    IpmiSim,
    by_sensor,
    sel_events,
    target,
)

FREEIPMI = shutil.which("ipmi-sensors") is not None and shutil.which("ipmi-sel") is not None
NO_FREEIPMI = "freeipmi's ipmi-sensors and ipmi-sel are not installed (apt-get install " \
              "freeipmi-tools; .ci/run does)"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[IpmiSim]:
    if IPMI_SIM is None or SDRCOMP is None or shutil.which("ipmitool") is None:
        pytest.skip(MISSING)
    if not FREEIPMI:
        pytest.skip(NO_FREEIPMI)
    bmc = IpmiSim(tmp_path / "bmc")
    bmc.start()
    yield bmc
    bmc.stop()


def _target(sim: IpmiSim, **kw: object) -> Target:
    return target(sim, **{"tool": "freeipmi", "workarounds": ("opensesspriv",), **kw})

def test_freeipmi_reads_what_ipmitool_reads(sim: IpmiSim,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, PASSWORD)
    argvs: list[list[str]] = []

    def runner(argv: object, timeout: float, env: object) -> tuple[int, str, str]:
        argvs.append(list(argv))  # type: ignore[call-overload]
        return run_process(argv, timeout, env)  # type: ignore[arg-type]

    c = IpmiCollector(_target(sim), host="gpu-node-7", timeout=30, runner=runner)
    ref = IpmiCollector(_target(sim, tool="ipmitool", workarounds=()), host="gpu-node-7",
                        timeout=30)
    first, ref_first = c.read(), ref.read()
    assert first.reachable and c.status.up, first.reason
    by = by_sensor(first)
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 0}
    assert by["fan", "1"] == {"fan_rpm": 5400.0, "fan_health": 0, "fan_rpm_lower_critical": 800.0}
    assert by["node", ""] == {"inlet_temp_c": 24.0, "psu_redundant": 1, "bmc_reachable": 1}
    assert by == by_sensor(ref_first)
    assert sel_events(first) == []
    assert [a[0] for a in argvs] == ["ipmi-sensors", "ipmi-sensors", "ipmi-sel", "ipmi-sel"]
    assert all(PASSWORD not in " ".join(a) for a in argvs)
    config = Path(argvs[0][argvs[0].index("--config-file") + 1])
    assert not config.exists()  # removed once the read ended

    sim.set_value(FAN1, 5)  # 500 RPM: below lower non-critical and lower critical
    sim.set_bit(PS1, FAILURE, 1)
    sim.set_only_bit(PS_REDUNDANCY, REDUNDANCY_LOST)
    second, ref_second = c.read(), ref.read()
    by = by_sensor(second)
    assert by["fan", "1"]["fan_rpm"] == 500.0 and by["fan", "1"]["fan_health"] == 2
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 2}
    assert by["node", ""]["psu_redundant"] == 0
    assert by == by_sensor(ref_second)
    # Lower non-critical (1), lower critical (2), failure detected (2), "Fully Redundant"
    # deasserted (no event), redundancy lost (2): as ipmitool reads the same log.
    assert [p.fields["code"] for p in sel_events(second)] == [1, 2, 2, 2]
    assert [p.fields for p in sel_events(second)] == [p.fields for p in sel_events(ref_second)]
    assert any("Fully Redundant (deasserted)" in r.reason for r in second.rejected)

    n = len(argvs)
    third = c.read()  # nothing changed: `ipmi-sel --info` says so and the log is not listed
    assert sel_events(third) == [] and [a[0] for a in argvs[n:]] == ["ipmi-sensors", "ipmi-sel"]
    c.close()


def test_a_wrong_password_is_unreachable_and_never_shown(
        sim: IpmiSim, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    wrong = "not-the#pw-93kd"
    monkeypatch.setenv(ENV, wrong)
    c = IpmiCollector(_target(sim), host="n1", timeout=30)
    with caplog.at_level(logging.DEBUG):
        got = c.read()
    assert not got.reachable and not c.status.up
    assert [(p.measurement, p.fields) for p in got.points] == [("node", {"bmc_reachable": 0})]
    assert "ipmi-sensors exited with status" in got.reason and "127.0.0.1" in got.reason
    assert wrong not in got.reason and wrong not in caplog.text and PASSWORD not in caplog.text


def test_password_file(sim: IpmiSim, tmp_path: Path) -> None:
    passfile = tmp_path / "bmc.pass"
    passfile.write_text(PASSWORD + "\n")
    passfile.chmod(0o600)
    got = IpmiCollector(_target(sim, password_file=passfile), host="n1", timeout=30).read()
    assert got.reachable, got.reason
    assert by_sensor(got)["fan", "2"]["fan_rpm"] == 5200.0
