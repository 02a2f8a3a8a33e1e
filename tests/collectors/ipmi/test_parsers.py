"""The ipmitool parsers and the schema mapping on our own captures (tests/collectors/captures/
ipmi/): Dell-style names (every fan on entity 7.1, input voltage named "Voltage 1"),
Supermicro-style (entity 29.x fans, 10.x supplies, 64 air inlet), and a SEL of mixed
severities with odd lines. Each odd line is skipped on its own with its reason."""

from __future__ import annotations

from collectors.frames import Rejection
from collectors.ipmi import (
    SelCursor,
    looks_like_sdr_elist,
    looks_like_sel,
    map_rows,
    parse_lower_critical,
    parse_sdr_elist,
    parse_sel_elist,
)
from collectors.lineprotocol import Point
from tests.collectors.own_captures import IPMI_SDR_DELL, IPMI_SDR_SUPERMICRO, IPMI_SEL, read


def _by(points: list[Point]) -> dict[tuple[str, str], dict[str, object]]:
    return {(p.measurement, p.tags.get(p.measurement, "")): dict(p.fields) for p in points}


def test_dell_names() -> None:
    rejected: list[Rejection] = []
    rows = parse_sdr_elist(read(IPMI_SDR_DELL), rejected)
    assert len(rows) == 21 and not rejected
    got = map_rows(rows, "n1", 7)
    by = _by(got.points)
    # Every fan on 7.1: the ids are the sensor names.
    assert by["fan", "Fan1"] == {"fan_rpm": 5880.0, "fan_health": 0}
    assert by["fan", "Fan3"] == {"fan_rpm": 360.0, "fan_health": 2}  # below lower critical
    assert ("fan", "Fan4") not in by  # Disabled
    # "Voltage 1" on 10.1 reads mains: supply 1's input; supply 2 failed with its input lost.
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 0, "psu_input_v": 230.0}
    assert by["psu", "2"] == {"psu_state": 3, "psu_health": 2}
    assert by["node", ""] == {"inlet_temp_c": 23.0, "exhaust_temp_c": 38.0,
                              "psu_redundant": 0, "fan_redundant": 0}
    assert all(p.ts_ns == 7 and p.tags["host"] == "n1" for p in got.points)
    reasons = {r.entity: r.reason for r in got.skipped}
    assert reasons["Fan4"] == "no reading (Disabled)"
    assert reasons["Pwr Consumption"] == "Watts reading with no metric here"
    assert reasons["Temp"].startswith("temperature that is not inlet or exhaust")
    assert "Dynamic MC" in reasons["iDRAC8"]


def test_supermicro_names() -> None:
    rejected: list[Rejection] = []
    rows = parse_sdr_elist(read(IPMI_SDR_SUPERMICRO), rejected)
    assert [r.line for r in rejected] == [16]  # "Get SDR 0042 command failed"
    assert "not an sdr elist row" in rejected[0].reason
    by = _by(map_rows(rows, "n2", 1).points)
    assert by["fan", "1"] == {"fan_rpm": 8400.0, "fan_health": 0}
    assert by["fan", "2"] == {"fan_rpm": 1400.0, "fan_health": 1}  # lnc
    assert by["fan", "4"] == {"fan_rpm": 0.0, "fan_health": 2}  # lnr
    assert ("fan", "3") not in by  # No Reading
    assert by["psu", "1"] == {"psu_state": 0, "psu_health": 0, "psu_temp_c": 37.0,
                              "psu_input_v": 228.0, "psu_output_w": 610.0}
    assert by["psu", "2"] == {"psu_state": 2}  # no state asserted: not present
    assert by["node", ""] == {"inlet_temp_c": 41.0}  # entity 64.1, upper non-critical


def test_lower_critical_thresholds_join_fans_by_name() -> None:
    table = ("FAN1             | 8400.000   | RPM        | ok    | 300.000   | 500.000   "
             "| 700.000   | 25300.000 | 25400.000 | 25500.000\n"
             "FAN2             | na         | RPM        | na    | na        | na        "
             "| na        | na        | na        | na\n"
             "CPU1 Temp        | 52.000     | degrees C  | ok    | 0.000     | 0.000     "
             "| 5.000     | 95.000    | 100.000   | 100.000\n")
    lcr = parse_lower_critical(table)
    assert lcr == {"FAN1": 500.0}
    rows = parse_sdr_elist(read(IPMI_SDR_SUPERMICRO))
    by = _by(map_rows(rows, "n2", 1, lcr).points)
    assert by["fan", "1"]["fan_rpm_lower_critical"] == 500.0
    assert "fan_rpm_lower_critical" not in by["fan", "2"]


def test_sel_severities() -> None:
    rejected: list[Rejection] = []
    entries = parse_sel_elist(read(IPMI_SEL), rejected)
    sev = {e.record_id: e.severity for e in entries}
    assert sev == {0x1: 0, 0x9: 0, 0xa: 2, 0xb: 2, 0xc: 2, 0xd: 1, 0xe: 2, 0xf: 0, 0x10: 1,
                   0x11: 1, 0x12: 2, 0x13: 2, 0x15: 0}
    assert [r.line for r in rejected] == [13, 15]  # the OEM record, the garbage line
    assert "OEM" in rejected[0].reason


def test_sel_cursor_gives_only_new_entries() -> None:
    entries = parse_sel_elist(read(IPMI_SEL))
    cursor = SelCursor()
    assert cursor.new(entries[:5]) == []  # the first read only sets the cursor
    assert [e.record_id for e in cursor.new(entries[:8])] == [0xd, 0xe, 0xf]
    assert cursor.new(entries[:8]) == []
    # Cleared: the highest id is below the cursor, so everything listed is new.
    assert [e.record_id for e in cursor.new(entries[:2])] == [0x1, 0x9]
    empty = SelCursor()
    assert empty.new([]) == [] and empty.last_id == 0
    assert [e.record_id for e in empty.new(entries[:1])] == [0x1]  # a first entry is news


def test_shapes_are_told_apart() -> None:
    assert looks_like_sdr_elist(read(IPMI_SDR_DELL))
    assert not looks_like_sdr_elist(read(IPMI_SEL))
    assert looks_like_sel(read(IPMI_SEL)) and looks_like_sel("SEL has no entries\n")
    assert not looks_like_sel(read(IPMI_SDR_SUPERMICRO))


def test_degrees_f_and_percent_fans() -> None:
    text = ("Ambient Temp     | 05h | ok  | 7.1 | 77 degrees F\n"
            "Fan 2 Duty       | 50h | ok  | 7.1 | 45 percent\n"
            "Fan Redundancy   | 51h | ok  | 30.1 | Redundancy Degraded\n"
            "Mystery Redund   | 52h | ok  | 7.1 | Fully Redundant\n"
            "PSU3 Status      | 53h | ok  | 10.3 | Presence detected, Predictive failure\n"
            "PSU4 Status      | 54h | ok  | 10.4 | Mystery state\n"
            "Odd              | 55h | zz  | 7.1 | 3 Volts\n")
    rejected: list[Rejection] = []
    got = map_rows(parse_sdr_elist(text, rejected), "n3", 1)
    by = _by(got.points)
    assert by["node", ""] == {"inlet_temp_c": 25.0, "fan_redundant": 1}
    assert by["fan", "Fan_2_Duty"] == {"fan_pct": 45.0, "fan_health": 0}
    assert by["psu", "3"] == {"psu_state": 0, "psu_health": 1}
    assert ("psu", "4") not in by
    reasons = {r.entity: r.reason for r in got.skipped}
    assert reasons["Mystery Redund"] == "redundancy sensor of neither supplies nor fans"
    assert "does not know" in reasons["PSU4 Status"]
    assert rejected and "unknown status 'zz'" in rejected[0].reason
