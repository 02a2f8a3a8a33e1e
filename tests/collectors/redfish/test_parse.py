"""The Redfish parser over our own captures of odd shapes (tests/collectors/captures/redfish):
percent fans, missing readings, a null Status, the older Power and Thermal resources, a fan
whose speed only an OEM section gives, SEL entries. Each odd sensor costs only its reading,
with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collectors.lineprotocol import Point
from collectors.redfish import read_resource, safe_path
from collectors.redfish.values import member_id
from service.commands.cli import main
from tests.collectors.own_captures import (
    REDFISH_FAN_OEM,
    REDFISH_POWER,
    REDFISH_SEL,
    REDFISH_THERMAL,
)
from tests.collectors.redfish.sushy import MOCKUP

TS = 1_772_500_000 * 10**9


def parsed(path: Path) -> tuple[list[Point], list[str], list[str]]:
    points, skips = read_resource(json.loads(path.read_text()), "n7", TS)
    return points, [str(r) for r in skips.rejected], skips.notes


def fields(points: list[Point], measurement: str) -> dict[str, dict[str, Any]]:
    return {p.tags.get(measurement, p.tags["host"]): p.fields for p in points
            if p.measurement == measurement}


def test_older_thermal_with_percent_fans_and_missing_members() -> None:
    points, skipped, notes = parsed(REDFISH_THERMAL)
    assert fields(points, "fan") == {
        "Fan_1A": {"fan_health": 0, "fan_pct": 38.0},  # a percent threshold is no rpm one
        "Fan_1B": {"fan_health": 1, "fan_pct": 12.0},  # "12": a number sent as a string
        "Fan_2A": {"fan_rpm": 7300.0, "fan_rpm_lower_critical": 1200.0},
        "Fan_2B": {"fan_health": 0, "fan_rpm_lower_critical": 1200.0},
        "Fan_4": {"fan_health": 0},
    }
    assert skipped == [
        "Thermal.Fans[2]: Status.Health is missing or null (n7, fan_health)",
        "Thermal.Fans[3]: Reading is missing or null (n7, fan_rpm)",
        "Thermal.Fans[5]: ReadingUnits 'Oem' is not RPM or Percent: reading not read "
        "(n7, fan_rpm)",
        "Thermal.Temperatures[1]: ReadingCelsius is missing or null (n7, exhaust_temp_c)",
    ]
    assert notes == ["Thermal.Fans[4] (Fan_3): absent"]
    # The inlet sensor found by its name ("System Board Inlet Temp" on SystemBoard).
    assert fields(points, "node") == {"n7": {"inlet_temp_c": 23.0, "fan_redundant": 0}}


def test_older_power_with_a_failed_a_spare_and_an_oem_only_supply() -> None:
    points, skipped, _ = parsed(REDFISH_POWER)
    assert fields(points, "psu") == {
        "PSU.Slot.1": {"psu_state": 0, "psu_health": 0, "psu_input_v": 208.0,
                       "psu_output_w": 1410.0},
        "PSU.Slot.2": {"psu_state": 3, "psu_health": 2, "psu_input_v": 0.0},
        "PSU.Slot.3": {"psu_state": 1, "psu_health": 0, "psu_input_v": 207.0,
                       "psu_output_w": 0.0},
    }
    assert skipped == [
        "Power.PowerSupplies[1]: LastPowerOutputWatts is missing or null (n7, psu_output_w)",
        "Power.PowerSupplies[3]: Status.State is missing or null (n7, psu_state)",
        "Power.PowerSupplies[3]: Status.Health is missing or null (n7, psu_health)",
        "Power.PowerSupplies[3]: LineInputVoltage is missing or null (n7, psu_input_v)",
        "Power.PowerSupplies[3]: LastPowerOutputWatts is missing or null (n7, psu_output_w)",
    ]
    assert fields(points, "node") == {"n7": {"psu_redundant": 0}}


def test_a_fan_whose_speed_only_the_oem_section_gives() -> None:
    points, skipped, _ = parsed(REDFISH_FAN_OEM)
    assert fields(points, "fan") == {"FAN7": {"fan_health": 0}}
    assert skipped == ["Fans/FAN7: SpeedPercent is missing or null (n7, fan_rpm)"]


def test_sel_entries_become_events_at_their_creation_time() -> None:
    points, skipped, _ = parsed(REDFISH_SEL)
    at = 1_772_439_245 * 10**9  # 2026-03-02T08:14:05Z; entry 3 says it in +02:00
    assert [(p.measurement, p.fields, p.ts_ns) for p in points] == [
        ("sel", {"code": 2}, at), ("sel", {"code": 1}, at)]
    assert skipped == ["Entries entry 4: Severity 'Informational' is not OK, Warning or "
                       "Critical (n7, sel)"]


def test_parse_cli_reads_a_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "redfish", str(REDFISH_POWER), "--host", "n7"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].startswith("psu,host=n7,psu=PSU.Slot.1 psu_state=0i")
    assert "refused" in out.err


@pytest.mark.parametrize(("link", "want"), [
    ("/redfish/v1/Chassis/1U/Thermal#/Fans/0", "/redfish/v1/Chassis/1U/Thermal"),
    ("/redfish/v1/", "/redfish/v1"),
    ("https://pdu.example.com/redfish/v1/PowerEquipment", None),  # another host
    ("/redfish/v1/../../etc/passwd", None),
    ("/redfish/v1/Chassis\r\nX-Injected: 1", None),
    ("/other/v1", None),
    (None, None),
])
def test_links_from_a_bmc_are_checked(link: object, want: str | None) -> None:
    assert safe_path(link) == want


def test_ids_follow_the_name_grammar() -> None:
    assert member_id({"MemberId": "PSU 1 (left)"}, 0) == "PSU_1_left"
    assert member_id({"Id": "-bad"}, 3) == "bad"
    assert member_id({"Id": "..."}, 3) == "3"
    assert member_id({}, 5) == "5"


@pytest.mark.skipif(not MOCKUP.is_dir(), reason="needs ../shared/reference/redfish/"
                    "public-rackmount1 beside the repo")
def test_parse_cli_reads_the_dmtf_mockup_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "redfish", str(MOCKUP), "--host", "n7"]) == 0
    heads = [x.split(" ")[0] for x in capsys.readouterr().out.splitlines()]
    assert heads[:7] == ["psu,host=n7,psu=Bay1", "psu,host=n7,psu=Bay2", "fan,fan=Bay1,host=n7",
                         "fan,fan=Bay2,host=n7", "fan,fan=CPU1,host=n7", "fan,fan=CPU2,host=n7",
                         "node,host=n7"]
    assert heads[7:] == ["sel,host=n7"] * 3  # a capture has no earlier read: all are new
