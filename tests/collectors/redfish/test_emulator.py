"""The Redfish source against a real Redfish emulator (sushy-static) serving a copy of the
DMTF public-rackmount1 mockup whose readings the tests change: a failed supply, a fan below
its critical threshold, lost fan redundancy, a new event-log entry, an older BMC with only the
Power and Thermal resources, an emulator that stops answering, and TLS."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trustme

from collectors.frames import Rejection
from collectors.lineprotocol import Point
from collectors.redfish import Credentials, CredentialStore, Poller, PollerConfig, Secret
from collectors.redfish.collector import RedfishCollector
from collectors.redfish.targets import bmc
from tests.collectors.redfish.sushy import NEEDS, SushyStatic

pytestmark = NEEDS
PASSWORD = "s3cret-Pw-7781"
CREDS = CredentialStore(Credentials("monitor", Secret(PASSWORD)))
SUBSYSTEM = "Chassis/1U"


@pytest.fixture
def sushy(tmp_path: Path) -> Iterator[SushyStatic]:
    s = SushyStatic(tmp_path)
    s.start()
    yield s
    s.stop()


class Sink:
    def __init__(self) -> None:
        self.points: list[Point] = []
        self.rejected: list[Rejection] = []

    def __call__(self, points: list[Point], rejected: list[Rejection]) -> None:
        self.points += points
        self.rejected += rejected

    def take(self) -> list[Point]:
        out, self.points = self.points, []
        return out


def poller(url: str, sink: Sink, **cfg: Any) -> Poller:
    # sushy-static knows no sessions (it answers a login 204, no token): Basic auth.
    config = PollerConfig(**{"auth": "basic", "timeout_s": 10.0, **cfg})
    return Poller([bmc("n17", url)], CREDS, config, sink)


def by(points: list[Point], measurement: str) -> dict[str, dict[str, Any]]:
    key = {"psu": "psu", "fan": "fan"}.get(measurement)
    return {p.tags.get(key, p.tags["host"]) if key else p.tags["host"]: p.fields
            for p in points if p.measurement == measurement}


def test_reads_the_mockup_as_the_standard_defines_it(sushy: SushyStatic) -> None:
    sink = Sink()
    p = poller(sushy.url, sink)
    asyncio.run(p.cycle())
    points = sink.take()
    assert all(x.tags["host"] == "n17" for x in points)
    psus = by(points, "psu")
    assert psus == {"Bay1": {"psu_state": 0, "psu_health": 1, "psu_input_v": 230.2,
                             "psu_output_w": 937.4, "psu_temp_c": 43.9},
                    "Bay2": {"psu_state": 2}}  # an empty bay: absent, no health
    fans = by(points, "fan")
    assert fans["Bay1"] == {"fan_health": 0, "fan_pct": 45.0, "fan_rpm": 2200.0}
    assert fans["CPU1"] == {"fan_health": 0, "fan_pct": 45.0}  # no SpeedRPM: percent only
    # Bay2 of two is absent, the group UnavailableOffline: supply redundancy lost.
    assert by(points, "node")["n17"] == {"psu_redundant": 0, "fan_redundant": 1,
                                        "inlet_temp_c": 24.8, "exhaust_temp_c": 40.5,
                                        "bmc_reachable": 1}
    # The log's entries date from 2012: history, not news.
    assert not [x for x in points if x.measurement == "sel"]
    assert sink.rejected == []
    # Basic auth reached the emulator (it logs each request's headers); not the password.
    sent = base64.b64encode(f"monitor:{PASSWORD}".encode()).decode()
    assert f"Basic {sent}" in sushy.log()


def test_changed_readings_show_in_the_next_read(sushy: SushyStatic) -> None:
    sink = Sink()
    p = poller(sushy.url, sink)
    asyncio.run(p.cycle())
    sink.take()

    def fail(supply: dict[str, Any]) -> None:
        supply["Status"] = {"State": "UnavailableOffline", "Health": "Critical"}

    def slow(fan: dict[str, Any]) -> None:
        fan["Status"]["Health"] = "Critical"
        fan["SpeedPercent"]["SpeedRPM"] = 310
        fan["SpeedPercent"]["Reading"] = 6

    def lost(sub: dict[str, Any]) -> None:
        sub["FanRedundancy"][0]["Status"]["Health"] = "Critical"

    now = datetime.now(UTC).replace(microsecond=0)

    def new_entry(entries: dict[str, Any]) -> None:
        entries["Members"].append({
            "@odata.id": "/redfish/v1/Managers/BMC/LogServices/Log/Entries/2",
            "Id": "2", "EntryType": "SEL", "Severity": "Warning",
            "Created": now.isoformat().replace("+00:00", "Z"),
            "Message": "Fan 2 below lower critical", "Oem": {"Contoso": {"x": 1}}})

    sushy.edit("Chassis/1U/PowerSubsystem/PowerSupplies/Bay1", fail)
    sushy.edit("Chassis/1U/ThermalSubsystem/Fans/Bay2", slow)
    sushy.edit("Chassis/1U/ThermalSubsystem", lost)
    sushy.edit("Managers/BMC/LogServices/Log/Entries", new_entry)
    asyncio.run(p.cycle())
    points = sink.take()
    assert by(points, "psu")["Bay1"]["psu_health"] == 2
    assert by(points, "psu")["Bay1"]["psu_state"] == 3  # not delivering, not by design
    assert by(points, "fan")["Bay2"] == {"fan_health": 2, "fan_pct": 6.0, "fan_rpm": 310.0}
    assert by(points, "node")["n17"]["fan_redundant"] == 0
    sel = [x for x in points if x.measurement == "sel"]
    assert [(x.fields, x.ts_ns) for x in sel] == [({"code": 1}, int(now.timestamp()) * 10**9)]
    asyncio.run(p.cycle())  # the same entry is not news twice
    assert not [x for x in sink.take() if x.measurement == "sel"]


def test_an_older_bmc_with_only_power_and_thermal(sushy: SushyStatic) -> None:
    def older(chassis: dict[str, Any]) -> None:
        del chassis["PowerSubsystem"], chassis["ThermalSubsystem"]

    def below(thermal: dict[str, Any]) -> None:
        fan = thermal["Fans"][1]
        fan["Reading"], fan["LowerThresholdCritical"] = 310, 500
        fan["Status"]["Health"] = "Critical"
        thermal["Fans"][0]["Reading"] = None  # a BMC that lost one reading

    sushy.edit(SUBSYSTEM, older)
    sushy.edit("Chassis/1U/Thermal", below)
    sink = Sink()
    asyncio.run(poller(sushy.url, sink).cycle())
    points = sink.take()
    assert by(points, "psu") == {"0": {"psu_state": 0, "psu_health": 1, "psu_input_v": 120.0,
                                       "psu_output_w": 325.0}}
    fans = by(points, "fan")
    assert fans["1"] == {"fan_health": 2, "fan_rpm": 310.0, "fan_rpm_lower_critical": 500.0}
    assert fans["0"] == {"fan_health": 0}  # its reading skipped, the fan kept
    assert [str(r) for r in sink.rejected] == [
        "Thermal.Fans[0]: Reading is missing or null (n17, fan_rpm)"]
    assert by(points, "node")["n17"] == {"inlet_temp_c": 25.0, "fan_redundant": 1,
                                        "bmc_reachable": 1}


def test_an_unreachable_bmc_reports_it_and_backs_off(sushy: SushyStatic) -> None:
    sink = Sink()
    p = poller(sushy.url, sink, interval_s=60.0)
    asyncio.run(p.cycle())
    sushy.stop()
    st = p.states[0]
    for failures in (1, 2, 3):
        t0 = time.monotonic()
        asyncio.run(p.cycle())
        assert st.failures == failures and st.reachable is False
        # interval x 2^(failures-1) after the read began
        assert st.next_at - t0 == pytest.approx(60.0 * 2 ** (failures - 1), abs=5)
    points = sink.take()
    assert [x.fields for x in points if x.measurement == "node"][-1] == {"bmc_reachable": 0}
    assert "127.0.0.1" in sink.rejected[-1].reason and sink.rejected[-1].entity == "n17"


def test_tls_verify_is_configurable(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key_file, cert_file, ca_file = (tmp_path / "k.pem", tmp_path / "c.pem", tmp_path / "ca.pem")
    cert.private_key_pem.write_to_path(key_file)
    cert.cert_chain_pems[0].write_to_path(cert_file)
    ca.cert_pem.write_to_path(ca_file)
    s = SushyStatic(tmp_path)
    s.start(cert_file, key_file)
    try:
        for verify, reached in ((str(ca_file), 1), (False, 1), (True, 0)):
            sink = Sink()
            asyncio.run(poller(s.url, sink, verify=verify).cycle())
            node = [x.fields for x in sink.points if x.measurement == "node"]
            assert node[-1]["bmc_reachable"] == reached, verify
            if not reached:  # a self-signed BMC against the system's CAs
                assert "TLS" in sink.rejected[-1].reason
    finally:
        s.stop()


def test_the_collector_never_shows_the_password(sushy: SushyStatic, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_BMC_USERNAME", "monitor")
    monkeypatch.setenv("GPUHEALTH_BMC_PASSWORD", PASSWORD)
    caplog.set_level(logging.DEBUG)
    c = RedfishCollector.from_config("head", {
        "bmcs": [f"n17={sushy.url}", "n18=http://127.0.0.1:9"],  # n18: refused
        "auth": "basic", "interval_s": 1, "timeout_s": 5})  # n18 starts 0.5 s in
    try:
        c.start()
        deadline = time.monotonic() + 20
        while any(s.reachable is None for s in c.poller.states) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        points, rejected = c.take_points()
    finally:
        c.close()
    reach = {x.tags["host"]: x.fields["bmc_reachable"] for x in points
             if x.measurement == "node"}
    assert reach == {"n17": 1, "n18": 0}
    shown = " ".join([caplog.text, repr(c), repr(c.poller), repr(c.poller.states),
                      repr(c.poller.credentials), c.status.reason,
                      *(str(r) for r in rejected), *(repr(x) for x in points)])
    encoded = base64.b64encode(f"monitor:{PASSWORD}".encode()).decode()
    assert PASSWORD not in shown and encoded not in shown
    assert "[REDACTED]" in repr(c.poller.credentials)
