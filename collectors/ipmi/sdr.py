"""`ipmitool sdr elist` rows: one line per sensor of the BMC's Sensor Data Record repository.

The extended list is ipmitool's `ipmi_sdr_print_sensor_fc` with `sdr_extended` set (lib/ipmi_sdr.c
in the ipmitool sources): `printf("%-16s | %02Xh | %-3s | %2d.%1d | ", id, sensor_number,
status, entity_id, entity_instance)` and then the reading: `"%s %s"` (value, unit string) for
an analog threshold sensor, the asserted discrete states joined by ", " (the IPMI 2.0 spec's
generic and sensor-specific offset names, Tables 42-2 and 42-3, as ipmitool spells them), or
"No Reading" / "Disabled" (status `ns`); event-only sensors print "Event-Only" and management
controller locators "Static MC @ 20h". The status is `ok`, `ns`, or the worst threshold crossed:
`lnc`/`unc` (non-critical), `lcr`/`ucr` (critical), `lnr`/`unr` (non-recoverable); ipmitool
1.8.11 and older print `nc`, `cr`, `nr`.

The CSV form (`ipmitool -c sdr elist`) is not used: for threshold sensors it drops the entity
(`name,reading,unit,status`), which the mapping below needs.

A row that is not of this shape is refused on its own with the reason; the rest still read.
"""

from __future__ import annotations

import re

from collectors.compat import dataclass
from collectors.frames import Rejection

# Status words: ok, then the threshold statuses of ipmi_sdr_get_thresh_status.
HEALTH_OF_STATUS: dict[str, int] = {
    "ok": 0,
    "nc": 1, "lnc": 1, "unc": 1,
    "cr": 2, "lcr": 2, "ucr": 2,
    "nr": 2, "lnr": 2, "unr": 2,
}
NO_READING = frozenset(("No Reading", "Disabled", "Event-Only", "Not Readable"))

_ENTITY = re.compile(r"(\d{1,3})\.(\d{1,3})")
_NUMBER = re.compile(r"([0-9A-Fa-f]{2})h")
_ANALOG = re.compile(r"(-?\d+(?:\.\d+)?) (\S.*)")


@dataclass(frozen=True, slots=True)
class SdrRow:
    """One sensor. `value`/`unit` for an analog reading, else `states` (the asserted discrete
    states, possibly none); `status` is ipmitool's status word (ok, ns, lcr, ...)."""

    name: str
    number: int
    status: str
    entity: int
    instance: int
    value: float | None = None
    unit: str = ""
    states: tuple[str, ...] = ()
    line: int = 0

    @property
    def readable(self) -> bool:
        return self.status != "ns"


def parse_sdr_elist(text: str, rejected: list[Rejection] | None = None) -> list[SdrRow]:
    """Every sensor row of `ipmitool sdr elist` output; blank lines are ignored, any other
    line that is not a row goes to `rejected` with the reason."""
    rows: list[SdrRow] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        row = _row(raw, n)
        if isinstance(row, SdrRow):
            rows.append(row)
        elif rejected is not None:
            rejected.append(Rejection(row, line=n))
    return rows


def looks_like_sdr_elist(text: str) -> bool:
    """At least one line is an sdr elist row (told apart from `sel elist` by its sensor
    number column "NNh")."""
    return any(isinstance(_row(x, 0), SdrRow) for x in text.splitlines()[:200] if x.strip())


def _row(raw: str, n: int) -> SdrRow | str:
    cols = [c.strip() for c in raw.split("|")]
    if len(cols) != 5:
        return f"not an sdr elist row ({len(cols)} '|'-separated columns, want 5): {raw[:80]!r}"
    name, num, status, ent, reading = cols
    m_num, m_ent = _NUMBER.fullmatch(num), _ENTITY.fullmatch(ent)
    if m_num is None or m_ent is None:
        return f"not an sdr elist row (sensor number {num!r}, entity {ent!r}): {raw[:80]!r}"
    if status != "ns" and status not in HEALTH_OF_STATUS:
        return f"sensor {name!r}: unknown status {status!r}"
    base = SdrRow(name, int(m_num.group(1), 16), status, int(m_ent.group(1)),
                  int(m_ent.group(2)), line=n)
    if status == "ns" or reading in NO_READING:
        return SdrRow(base.name, base.number, "ns", base.entity, base.instance,
                      states=(reading,) if reading else (), line=n)
    analog = _ANALOG.fullmatch(reading)
    if analog is not None:
        return SdrRow(base.name, base.number, status, base.entity, base.instance,
                      value=float(analog.group(1)), unit=analog.group(2).strip(), line=n)
    states = tuple(s.strip() for s in reading.split(",") if s.strip())
    return SdrRow(base.name, base.number, status, base.entity, base.instance, states=states,
                  line=n)
