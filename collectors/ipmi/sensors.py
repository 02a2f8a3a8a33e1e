"""SDR rows onto the agreed schema: `psu` and `fan` points per supply and fan, one `node` point
(inlet/exhaust temperature, supply and fan redundancy).

`sdr elist` gives no sensor type, so a sensor is recognised by its entity (IPMI 2.0 Table
43-13: 10 power supply, 19 power unit, 29 fan/cooling device, 30 cooling unit, 55 and 64 air
inlet), its reading's unit and discrete states, and its name. The heuristics, in order:

- a reading with a redundancy state (generic offset type 0Bh: "Fully Redundant", "Redundancy
  Lost", ...) is `psu_redundant` when the sensor names a supply ("PS", "PSU", "Power") or sits
  on entity 10/19, `fan_redundant` when it names a fan or sits on entity 29/30;
- a supply is entity 10, or a name like "PS1 ...", "PSU2 ...", "PWS-1 ...", "Power Supply 1":
  its discrete states give `psu_health` ("Failure detected" 2, "Predictive failure" 1) and
  `psu_state` (input lost 3, "Power Supply Inactive" = standby by design 1, no state asserted
  = not present 2, else 0), its Volts reading is
  `psu_input_v` when the name says input ("In", "Input", "Vin", "AC") or it reads mains
  (80 V or more), its Watts reading
  `psu_output_w` unless the name says input, its temperature `psu_temp_c`;
- an RPM reading is a fan (`fan_rpm`); a percent reading named "fan" is `fan_pct`;
- a temperature named inlet/ambient/intake or on entity 55/64 is `inlet_temp_c` (the hottest,
  when a BMC has several), one named exhaust/outlet is `exhaust_temp_c` (the hottest too);
- anything else (CPU and DIMM temperatures, board voltages, system power) is skipped.

Health of a threshold sensor is its status: ok 0, non-critical 1, critical or non-recoverable
2; a supply's or fan's health is the worst of its sensors. Ids: a supply is its entity
instance and a fan its entity instance on entity 29, unless two sensors naming different units
share one instance or a sensor sits off that entity (Dell puts every fan on 7.1): then a supply
is the number in its name ("PS2 Status" -> "2") and a fan its sensor name made safe for the
name grammar ("Fan1A" -> "Fan1A", "SYS FAN 2" -> "SYS_FAN_2").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field

from collectors.compat import dataclass
from collectors.frames import Rejection, name_problem
from collectors.ipmi.sdr import HEALTH_OF_STATUS, SdrRow
from collectors.lineprotocol import FieldValue, Point

ENTITY_PSU, ENTITY_POWER_UNIT, ENTITY_FAN, ENTITY_COOLING = 10, 19, 29, 30
ENTITY_AIR_INLET = frozenset((55, 64))
# A supply's outputs are 12 V or 54 V; a reading above this is its mains input (Dell names
# the input "Voltage 1"). A dead input reads 0 V and is only known by its name.
MAINS_MIN_V = 80.0

REDUNDANT_STATES = {  # generic event/reading type 0Bh, offsets 0-7
    "fully redundant": 1,
    "redundancy lost": 0,
    "redundancy degraded": 1,  # lost some, still redundant
    "non-redundant: sufficient from redundant": 0,
    "non-redundant: sufficient from insufficient": 0,
    "non-redundant: insufficient resources": 0,
    "redundancy degraded from fully redundant": 1,
    "redundancy degraded from non-redundant": 1,
}
# Power Supply (sensor type 08h) sensor-specific offsets, as ipmitool spells them.
_PSU_HEALTH = {"failure detected": 2, "predictive failure": 1, "config error": 2,
               "power supply ac lost": 2, "ac lost or out-of-range": 2,
               "ac out-of-range, but present": 1}
_PSU_INPUT_LOST = ("power supply ac lost", "ac lost or out-of-range")
# Offset 07h (IPMI 2.0 errata): outputs off because other supplies carry the load, by design.
_PSU_STANDBY = "power supply inactive"

_SUPPLY_NAME = re.compile(r"(?<![a-z])(?:psu|pws|ps|power\s*supply)[\s_-]*(\d+)", re.I)
_SUPPLY_WORD = re.compile(r"(?<![a-z])(?:psu?|pws|power|pwr)(?![a-z])|power\s*supply", re.I)
_FAN_WORD = re.compile(r"fan", re.I)
_INPUT_WORD = re.compile(r"(?<![a-z])(?:in|input|vin|ac|iin)(?![a-z])", re.I)
_INLET_WORD = re.compile(r"inlet|ambient|intake|(?<![a-z])amb(?![a-z])", re.I)
_EXHAUST_WORD = re.compile(r"exhaust|outlet|(?<![a-z])exh(?![a-z])", re.I)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(slots=True)
class Mapped:
    """What one SDR listing gave: points and the sensors skipped, each with its reason."""

    points: list[Point] = field(default_factory=list)
    skipped: list[Rejection] = field(default_factory=list)


@dataclass(slots=True)
class _Unit:
    """A supply or fan while its sensors are gathered."""

    fields: dict[str, FieldValue] = field(default_factory=dict)
    health: int | None = None

    def worst(self, health: int | None) -> None:
        if health is not None:
            self.health = health if self.health is None else max(self.health, health)


def safe_id(name: str) -> str:
    """A sensor name as a tag value of the name grammar (collectors/frames.py)."""
    out = _UNSAFE.sub("_", name.strip()).strip("_-")
    return out[:63] or "unnamed"


def map_rows(rows: Iterable[SdrRow], host: str, ts_ns: int,
             lower_critical: Mapping[str, float] | None = None) -> Mapped:
    """Points of one read. `lower_critical` is each fan sensor's lower critical threshold by
    sensor name (collectors.ipmi.thresholds), when it was read."""
    out = Mapped()
    rows = list(rows)
    node: dict[str, FieldValue] = {}
    supplies: dict[str, _Unit] = defaultdict(_Unit)
    fans: dict[str, _Unit] = defaultdict(_Unit)
    psu_ids = _ids([r for r in rows if _is_supply(r) and not _is_redundancy(r)], ENTITY_PSU,
                   _psu_default)
    fan_ids = _ids([r for r in rows if _is_fan_speed(r)], ENTITY_FAN, _fan_default)
    inlet: list[float] = []
    exhaust: list[float] = []
    for r in rows:
        why = _map_one(r, node, supplies, fans, psu_ids, fan_ids, inlet, exhaust,
                       lower_critical or {})
        if why is not None:
            out.skipped.append(Rejection(why, line=r.line or None, entity=r.name))
    if inlet:
        node["inlet_temp_c"] = max(inlet)
    if exhaust:
        node["exhaust_temp_c"] = max(exhaust)
    for kind, units, health_field in (("psu", supplies, "psu_health"),
                                      ("fan", fans, "fan_health")):
        for uid, unit in sorted(units.items()):
            if unit.health is not None:
                unit.fields[health_field] = unit.health
            if unit.fields:
                out.points.append(Point(kind, {"host": host, kind: uid}, unit.fields, ts_ns))
    if node:
        out.points.append(Point("node", {"host": host}, node, ts_ns))
    return out


def _map_one(r: SdrRow, node: dict[str, FieldValue], supplies: dict[str, _Unit],
             fans: dict[str, _Unit], psu_ids: Mapping[tuple[str, int], str],
             fan_ids: Mapping[tuple[str, int], str],
             inlet: list[float], exhaust: list[float],
             lower_critical: Mapping[str, float]) -> str | None:
    """Files one row; returns why it was skipped, or None."""
    if not r.readable:
        return f"no reading ({', '.join(r.states) or 'ns'})"
    if _is_redundancy(r):
        return _redundancy(r, node)
    health = HEALTH_OF_STATUS.get(r.status)
    if _is_supply(r):
        unit = supplies[psu_ids[_key(r)]]
        if r.value is None:
            return _supply_states(r, unit)
        unit.worst(health)
        return _supply_reading(r, unit)
    if _is_fan_speed(r):
        assert r.value is not None
        fan = fans[fan_ids[_key(r)]]
        fan.worst(health)
        if _is_rpm(r.unit):
            fan.fields["fan_rpm"] = r.value
            if r.name in lower_critical:
                fan.fields["fan_rpm_lower_critical"] = lower_critical[r.name]
        else:
            fan.fields["fan_pct"] = r.value
        return None
    if r.value is None:
        return f"discrete sensor with no metric here (states: {', '.join(r.states) or 'none'})"
    celsius = _celsius(r.value, r.unit)
    if celsius is None:
        return f"{r.unit} reading with no metric here"
    if _INLET_WORD.search(r.name) or r.entity in ENTITY_AIR_INLET:
        inlet.append(celsius)
        return None
    if _EXHAUST_WORD.search(r.name):
        exhaust.append(celsius)
        return None
    return "temperature that is not inlet or exhaust (board, CPU, memory)"


def _redundancy(r: SdrRow, node: dict[str, FieldValue]) -> str | None:
    value = min(REDUNDANT_STATES[s.lower()] for s in r.states if s.lower() in REDUNDANT_STATES)
    if _SUPPLY_WORD.search(r.name) or r.entity in (ENTITY_PSU, ENTITY_POWER_UNIT):
        node["psu_redundant"] = value
        return None
    if _FAN_WORD.search(r.name) or r.entity in (ENTITY_FAN, ENTITY_COOLING):
        node["fan_redundant"] = value
        return None
    return "redundancy sensor of neither supplies nor fans"


def _supply_states(r: SdrRow, unit: _Unit) -> str | None:
    states = [s.lower() for s in r.states]
    if not states:  # nothing asserted, not even "Presence detected"
        unit.fields["psu_state"] = 2
        return None
    known = [s for s in states if s in _PSU_HEALTH or s in ("presence detected", _PSU_STANDBY)]
    if not known:
        return f"supply sensor with states this reader does not know: {', '.join(r.states)}"
    unit.worst(max((_PSU_HEALTH.get(s, 0) for s in states), default=0))
    unit.fields["psu_state"] = (3 if any(s in _PSU_INPUT_LOST for s in states)
                                else 1 if _PSU_STANDBY in states else 0)
    return None


def _supply_reading(r: SdrRow, unit: _Unit) -> str | None:
    assert r.value is not None
    unit_l = r.unit.lower()
    if unit_l == "volts":
        if _INPUT_WORD.search(r.name) or r.value >= MAINS_MIN_V:
            unit.fields["psu_input_v"] = r.value
            return None
        return "supply voltage below mains and not named input (no metric here)"
    if unit_l == "watts":
        if _INPUT_WORD.search(r.name):
            return "supply input power (no metric here)"
        unit.fields["psu_output_w"] = r.value
        return None
    celsius = _celsius(r.value, r.unit)
    if celsius is not None:
        unit.fields["psu_temp_c"] = max(celsius, float(unit.fields.get("psu_temp_c", celsius)))
        return None
    if _is_rpm(r.unit):
        return "supply fan speed (not a chassis fan)"
    return f"supply {r.unit} reading with no metric here"


def _is_redundancy(r: SdrRow) -> bool:
    return r.value is None and any(s.lower() in REDUNDANT_STATES for s in r.states)


def _is_supply(r: SdrRow) -> bool:
    return r.entity == ENTITY_PSU or _SUPPLY_NAME.search(r.name) is not None


def _is_fan_speed(r: SdrRow) -> bool:
    if r.value is None:
        return False
    return _is_rpm(r.unit) or (_is_percent(r.unit) and _FAN_WORD.search(r.name) is not None)


def _is_rpm(unit: str) -> bool:
    return unit.lower() == "rpm"


def _is_percent(unit: str) -> bool:
    return unit.lower() in ("percent", "%")


def _celsius(value: float, unit: str) -> float | None:
    u = unit.lower()
    if u == "degrees c":
        return value
    if u == "degrees f":
        return round((value - 32.0) * 5.0 / 9.0, 3)
    return None


def _psu_default(r: SdrRow) -> str:
    """The supply number in the name ("PS2 Status" -> "2"), else the entity instance (Dell's
    "Voltage 1" and "Current 1" on 10.1 belong to "PS1 Status" on 10.1)."""
    m = _SUPPLY_NAME.search(r.name)
    return m.group(1) if m is not None else str(r.instance)


def _fan_default(r: SdrRow) -> str:
    return safe_id(r.name)


def _ids(rows: list[SdrRow], entity: int,
         name_of: Callable[[SdrRow], str]) -> dict[tuple[str, int], str]:
    """Each row's unit id, by (sensor name, number): the entity instance, unless a sensor sits
    off the class's entity or two sensors naming different units share an instance."""
    names: dict[int, set[str]] = defaultdict(set)
    for r in rows:
        names[r.instance].add(name_of(r))
    use_instance = (all(r.entity == entity for r in rows)
                    and all(len(v) == 1 for v in names.values()))
    out: dict[tuple[str, int], str] = {}
    for r in rows:
        uid = str(r.instance) if use_instance else name_of(r)
        out[_key(r)] = uid if name_problem(uid, "id") is None else safe_id(uid)
    return out


def _key(r: SdrRow) -> tuple[str, int]:
    return (r.name, r.number)
