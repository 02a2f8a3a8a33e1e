"""freeipmi's `ipmi-sensors` output as the SDR rows the ipmitool path gives (collectors.ipmi.sdr
SdrRow), so both tools go through the same mapping (collectors.ipmi.sensors) to the same points.

The reading comes from `ipmi-sensors --comma-separated-output --output-sensor-thresholds
--non-abbreviated-units` (the CSV form Prometheus' ipmi_exporter reads too), its header kept so
the columns are found by name: `ID,Name,Type,Reading,Units,Lower NR,Lower C,Lower NC,Upper NC,
Upper C,Upper NR,Event` (a `State` column where --output-sensor-state is given). ID is the SDR
record id, Reading a number or "N/A", Units the IPMI unit name ("RPM", "degrees C", "Volts",
"Watts": the spec's names, as ipmitool prints them), and Event the sensor's state as quoted
messages (`'Presence detected' 'Power Supply Failure detected'`) from freeipmi's
ipmi_get_sensor_event_messages: for a threshold sensor one message, the worst threshold it is
at ("At or Below (<=) Lower Critical Threshold") or 'OK'; for a discrete sensor every asserted
state, 'OK' when none is; "N/A" when the sensor gives no reading (ipmi-sensors(8)). The Event
column is the last, so a message with a comma ("Power Supply input out-of-range, but present")
stays whole.

freeipmi's State (Nominal/Warning/Critical) is its own interpretation (freeipmi_interpret_
sensor.conf, site-editable: the default calls an inlet at its upper non-critical threshold
Nominal), so health is taken from the event as on the ipmitool path: the threshold crossed
gives ipmitool's status word (lnc, lcr, ...). freeipmi's message spellings (libfreeipmi/spec/
ipmi-sensor-and-event-code-tables-spec.c) are turned into ipmitool's where they differ.

The CSV has no entity, which the mapping needs (a supply's "Voltage 1" on entity 10, fans by
entity instance), so `ipmi-sensors -v` is read now and then for it: one block per record with
"Record ID: 4", "Sensor Number: 3", "Entity ID: fan/cooling device (29)" (or "Entity ID: 55" for
an id freeipmi has no name for) and "Entity Instance: 1" lines (ipmi-sensors-detailed-output.c).
A record missing from that map is placed by its sensor type (Power Supply 10, Power Unit 19, Fan
29, Cooling Device 30) with instance 0, so ids fall back to the sensor names.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import NamedTuple

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.ipmi.sdr import SdrRow

# freeipmi's spelling -> ipmitool's (lower case), where collectors.ipmi.sensors and .sel read it.
SPELLING = {
    "power supply failure detected": "Failure detected",
    "power supply input lost (ac/dc)": "Power Supply AC lost",
    "power supply input lost or out-of-range": "AC lost or out-of-range",
    "power supply input out-of-range, but present": "AC out-of-range, but present",
    "power supply inactive (in standby state)": "Power Supply Inactive",
    "configuration error": "Config Error",
    "non-redundant:sufficient resources from redundant":
        "Non-Redundant: Sufficient from Redundant",
    "non-redundant:sufficient resources from insufficient resources":
        "Non-Redundant: Sufficient from Insufficient",
    "non-redundant:insufficient resources": "Non-Redundant: Insufficient Resources",
}
_ENTITY_OF_TYPE = {"power supply": 10, "power unit": 19, "fan": 29, "cooling device": 30}
_THRESHOLD = re.compile(r"at or (?:below|above) \([<>]=\) (lower|upper) "
                        r"(non-critical|critical|non-recoverable) threshold", re.I)
_STATUS = {("lower", "non-critical"): "lnc", ("lower", "critical"): "lcr",
           ("lower", "non-recoverable"): "lnr", ("upper", "non-critical"): "unc",
           ("upper", "critical"): "ucr", ("upper", "non-recoverable"): "unr"}
_RANK = {"ok": 0, "lnc": 1, "unc": 1, "lcr": 2, "ucr": 2, "lnr": 3, "unr": 3}
_QUOTED = re.compile(r"'([^']*)'")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_NEEDED = ("ID", "Name", "Type", "Reading", "Units", "Event")
NO_READING = frozenset(("N/A", "Unknown"))


class Placement(NamedTuple):
    entity: int
    instance: int
    number: int  # the sensor number


@dataclass(slots=True)
class SensorsListing:
    rows: list[SdrRow] = field(default_factory=list)
    lower_critical: dict[str, float] = field(default_factory=dict)  # by sensor name, RPM only


def ipmitool_spelling(message: str) -> str:
    return SPELLING.get(message.strip().lower(), message.strip())


def parse_sensors_csv(text: str, rejected: list[Rejection] | None = None,
                      placements: dict[int, Placement] | None = None) -> SensorsListing:
    """Every sensor of `ipmi-sensors --comma-separated-output ...` output with its header.
    Lines that are not rows go to `rejected` with the reason; no header is one rejection."""
    out = SensorsListing()
    header: list[str] | None = None
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if header is None:
            cols = [c.strip() for c in raw.split(",")]
            if all(k in cols for k in _NEEDED):
                header = cols
            elif rejected is not None:
                rejected.append(Rejection(f"not the ipmi-sensors CSV header: {raw[:80]!r}",
                                          line=n))
            continue
        cells = raw.split(",", len(header) - 1)
        got = _row(dict(zip(header, (c.strip() for c in cells))), len(cells) == len(header),
                   n, placements or {})
        if isinstance(got, str):
            if rejected is not None:
                rejected.append(Rejection(got, line=n))
            continue
        row, lcr = got
        out.rows.append(row)
        if lcr is not None:
            out.lower_critical[row.name] = lcr
    return out


def looks_like_sensors_csv(text: str) -> bool:
    first = next((x for x in text.splitlines()[:5] if x.strip()), "")
    cols = [c.strip() for c in first.split(",")]
    return all(k in cols for k in _NEEDED)


def _row(c: dict[str, str], whole: bool, n: int,
         placements: dict[int, Placement]) -> tuple[SdrRow, float | None] | str:
    if not whole or not c["ID"].isdigit():
        return f"not an ipmi-sensors row (record id {c.get('ID', '')[:20]!r}, " \
               f"{len(c)} columns)"
    rid, name, reading, units = int(c["ID"]), c["Name"], c["Reading"], c["Units"]
    place = placements.get(rid) or Placement(_ENTITY_OF_TYPE.get(c["Type"].lower(), 0), 0, rid)
    events = _QUOTED.findall(c["Event"]) or [c["Event"].strip()]
    base = (name, place.number)
    if any(e in NO_READING for e in events) or (reading in NO_READING and units != "N/A"):
        return SdrRow(*base, "ns", place.entity, place.instance, states=(events[0],),
                      line=n), None
    if reading not in NO_READING:
        if _NUMBER.fullmatch(reading) is None:
            return f"sensor {name!r}: reading {reading[:40]!r} is not a number"
        status = _threshold_status(events)
        if status is None:
            return f"sensor {name!r}: threshold event not understood: {c['Event'][:80]!r}"
        lcr = _number(c.get("Lower C", "")) if units.lower() == "rpm" else None
        return SdrRow(*base, status, place.entity, place.instance, value=float(reading),
                      unit=units, line=n), lcr
    states = tuple(ipmitool_spelling(e) for e in events if e != "OK")
    return SdrRow(*base, "ok", place.entity, place.instance, states=states, line=n), None


def _threshold_status(events: list[str]) -> str | None:
    worst = "ok"
    for e in events:
        if e == "OK":
            continue
        m = _THRESHOLD.fullmatch(e.strip())
        if m is None:
            return None
        got = _STATUS[m.group(1).lower(), m.group(2).lower()]
        worst = got if _RANK[got] > _RANK[worst] else worst
    return worst


def _number(text: str) -> float | None:
    return float(text) if _NUMBER.fullmatch(text.strip()) else None


def parse_placements(text: str) -> dict[int, Placement]:
    """Record id -> (entity id, entity instance, sensor number) from `ipmi-sensors -v`; records
    without all four lines (locators, OEM records) are left out."""
    out: dict[int, Placement] = {}
    for block in re.split(r"\n\s*\n", text):
        kv: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                kv.setdefault(key.strip(), value.strip())
        rid, num, inst = kv.get("Record ID", ""), kv.get("Sensor Number", ""), \
            kv.get("Entity Instance", "")
        ent = re.search(r"(?:^|\()(\d+)\)?$", kv.get("Entity ID", ""))
        if rid.isdigit() and num.isdigit() and inst.isdigit() and ent is not None:
            out[int(rid)] = Placement(int(ent.group(1)), int(inst), int(num))
    return out
