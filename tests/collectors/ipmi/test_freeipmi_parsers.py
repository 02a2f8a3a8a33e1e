"""The freeipmi parsers and their mapping on our own captures (tests/collectors/captures/ipmi/
freeipmi-*): the Supermicro-style sensors of the ipmitool capture as ipmi-sensors prints them,
the entity map from `ipmi-sensors -v`, and a SEL of mixed severities. The live test
(test_live_freeipmi.py) checks the same parsers on a real BMC simulator."""

from __future__ import annotations

import pytest

from collectors.frames import Rejection
from collectors.ipmi import (
    Placement,
    SelCursor,
    looks_like_sel_csv,
    looks_like_sensors_csv,
    map_rows,
    parse_placements,
    parse_sel_csv,
    parse_sensors_csv,
)
from collectors.ipmi.freeipmi_sel import sel_mark
from collectors.ipmi.runner import Target, freeipmi_config
from collectors.lineprotocol import Point
from tests.collectors.own_captures import (
    FREEIPMI_SEL,
    FREEIPMI_SENSORS,
    FREEIPMI_VERBOSE,
    IPMI_SDR_SUPERMICRO,
    read,
)


def _by(points: list[Point]) -> dict[tuple[str, str], dict[str, object]]:
    return {(p.measurement, p.tags.get(p.measurement, "")): dict(p.fields) for p in points}


def test_entities_from_verbose_output() -> None:
    got = parse_placements(read(FREEIPMI_VERBOSE))
    assert got[12] == Placement(29, 1, 65) and got[15] == Placement(29, 4, 68)
    assert got[7] == Placement(64, 1, 10)  # "Entity ID: 64": no name, the number alone
    assert got[30] == Placement(10, 1, 200)
    assert 1 not in got  # the locator record has no sensor number


def test_sensors_with_entities() -> None:
    rejected: list[Rejection] = []
    listing = parse_sensors_csv(read(FREEIPMI_SENSORS), rejected,
                                parse_placements(read(FREEIPMI_VERBOSE)))
    assert len(listing.rows) == 18
    assert [r.line for r in rejected] == [20] and "not an ipmi-sensors row" in rejected[0].reason
    assert listing.lower_critical == {"FAN1": 500.0, "FAN2": 500.0, "FAN4": 500.0}
    got = map_rows(listing.rows, "n2", 1, listing.lower_critical)
    by = _by(got.points)
    # Fans on 29.x: their ids are the entity instances, as on the ipmitool path.
    assert by["fan", "1"] == {"fan_rpm": 8400.0, "fan_health": 0, "fan_rpm_lower_critical": 500.0}
    assert by["fan", "2"] == {"fan_rpm": 600.0, "fan_health": 1, "fan_rpm_lower_critical": 500.0}
    assert by["fan", "4"] == {"fan_rpm": 0.0, "fan_health": 2, "fan_rpm_lower_critical": 500.0}
    assert ("fan", "3") not in by  # N/A
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 0, "psu_temp_c": 37.0,
                              "psu_input_v": 228.0, "psu_output_w": 610.0}
    assert by["psu", "2"] == {"psu_state": 2}  # 'OK': no state asserted, not present
    assert by["psu", "3"] == {"psu_state": 1, "psu_health": 0}  # standby by design
    assert by["psu", "4"] == {"psu_state": 0, "psu_health": 1}  # input out of range
    assert by["node", ""] == {"inlet_temp_c": 41.0, "psu_redundant": 0, "fan_redundant": 1}
    reasons = {r.entity: r.reason for r in got.skipped}
    assert reasons["FAN3"] == "no reading (N/A)" and reasons["Exhaust Temp"] == "no reading (N/A)"
    assert reasons["12V"] == "Volts reading with no metric here"
    assert reasons["Chassis Intru"].startswith("discrete sensor with no metric here")


def test_same_readings_as_the_ipmitool_capture_where_the_bmc_says_the_same() -> None:
    from collectors.ipmi import parse_sdr_elist

    listing = parse_sensors_csv(read(FREEIPMI_SENSORS), None,
                                parse_placements(read(FREEIPMI_VERBOSE)))
    ours = _by(map_rows(listing.rows, "n2", 1).points)
    theirs = _by(map_rows(parse_sdr_elist(read(IPMI_SDR_SUPERMICRO)), "n2", 1).points)
    for key in (("fan", "1"), ("fan", "4"), ("psu", "1"), ("psu", "2")):
        assert ours[key] == theirs[key], key
    assert ours["node", ""]["inlet_temp_c"] == theirs["node", ""]["inlet_temp_c"]


def test_without_the_entity_map_sensors_are_placed_by_type_and_named() -> None:
    listing = parse_sensors_csv(read(FREEIPMI_SENSORS))
    by = _by(map_rows(listing.rows, "n2", 1).points)
    assert by["fan", "FAN2"]["fan_rpm"] == 600.0  # instance unknown: the sensor name
    assert by["psu", "1"]["psu_input_v"] == 228.0  # named PS1: still supply 1


@pytest.mark.parametrize(("line", "why"), [
    ("99,Fan9,Fan,fast,RPM,N/A,N/A,N/A,N/A,N/A,N/A,'OK'", "is not a number"),
    ("98,Fan8,Fan,100.00,RPM,N/A,N/A,N/A,N/A,N/A,N/A,'Going sideways'", "not understood"),
    ("x1,Fan7,Fan,100.00,RPM,N/A,N/A,N/A,N/A,N/A,N/A,'OK'", "not an ipmi-sensors row"),
    ("97,Fan6,Fan", "not an ipmi-sensors row"),
])
def test_odd_rows_are_refused_one_by_one(line: str, why: str) -> None:
    head = read(FREEIPMI_SENSORS).splitlines()[0]
    rejected: list[Rejection] = []
    listing = parse_sensors_csv(f"{head}\n{line}\n12,FAN1,Fan,8400.00,RPM,N/A,N/A,N/A,N/A,"
                                "N/A,N/A,'OK'\n", rejected)
    assert [r.name for r in listing.rows] == ["FAN1"]
    assert len(rejected) == 1 and why in rejected[0].reason


def test_no_header_is_refused() -> None:
    rejected: list[Rejection] = []
    assert parse_sensors_csv("12,FAN1,Fan,8400.00,RPM,'OK'\n", rejected).rows == []
    assert "header" in rejected[0].reason


def test_sel_severities() -> None:
    rejected: list[Rejection] = []
    entries = parse_sel_csv(read(FREEIPMI_SEL), rejected)
    assert {e.record_id: e.severity for e in entries} == {
        1: 0, 2: 2, 3: 2, 4: 0, 5: 2, 6: 1, 7: 2, 8: 0, 9: 1, 10: 1, 11: 2, 12: 1, 13: 0,
        14: 2, 15: 1}
    assert entries[5].event == "Lower Non-critical going low" and entries[5].sensor == "FAN2"
    assert entries[8].event == "AC out-of-range, but present"  # the comma kept
    assert [r.line for r in rejected] == [17]
    cursor = SelCursor()
    assert cursor.new(entries[:5]) == [] and [e.record_id for e in cursor.new(entries)][:2] \
        == [6, 7]


def test_sel_info_and_shapes() -> None:
    info = ("SEL version                            : 1.5\n"
            "Number of log entries                  : 9\n"
            "Free space remaining                   : 15856 bytes\n"
            "Recent addition timestamp              : Post-Init 45568 s\n"
            "Recent erase timestamp                 : Post-Init 0 s\n")
    assert sel_mark(info) == ("9", "Post-Init 45568 s")
    assert sel_mark("SEL version : 1.5\n") is None
    assert looks_like_sensors_csv(read(FREEIPMI_SENSORS))
    assert not looks_like_sensors_csv(read(FREEIPMI_SEL))
    assert looks_like_sel_csv(read(FREEIPMI_SEL))
    assert not looks_like_sel_csv(read(FREEIPMI_SENSORS))
    assert parse_sel_csv("ID,Date,Time,Name,Type,Event Direction,Event\n") == []


def test_config_file_text_and_argv() -> None:
    assert freeipmi_config("pw#x1") == "password pw\\#x1\n"  # '#' would start a comment
    for bad in ("two words", 'q"uote', "back\\slash", ""):
        with pytest.raises(ValueError) as err:
            freeipmi_config(bad)
        assert bad not in str(err.value) or not bad
    lan = Target(bmc="bmc-7.mgmt", user="monitor", port=6230, cipher=17, tool="freeipmi",
                 workarounds=("intel20", "opensesspriv"))
    from pathlib import Path
    argv = lan.freeipmi_argv("ipmi-sel", "--info", config=Path("c.conf"), cache=Path("cache"))
    assert argv == ["ipmi-sel", "-D", "LAN_2_0", "-h", "bmc-7.mgmt:6230", "-u", "monitor",
                    "--config-file", "c.conf", "-I", "17", "-W", "intel20,opensesspriv",
                    "--sdr-cache-directory", "cache", "--quiet-cache", "--sdr-cache-recreate",
                    "--info"]
    in_band = Target(tool="freeipmi").freeipmi_argv("ipmi-sensors", config=None,
                                                    cache=Path("c"))
    assert in_band[:3] == ["ipmi-sensors", "-D", "OPENIPMI"]
    with pytest.raises(ValueError, match="tool"):
        Target(tool="openipmi")
    with pytest.raises(ValueError, match="workaround"):
        Target(tool="freeipmi", workarounds=("-x",))
