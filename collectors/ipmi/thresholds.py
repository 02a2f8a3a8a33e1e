"""Lower critical thresholds from `ipmitool sensor` (the threshold table).

ipmitool's `ipmi_sensor_print_fc_threshold` (lib/ipmi_sensor.c) prints one row per sensor:
`%-16s | %-10s | %-10s | %-6s` (name, reading, unit, status) and then the six thresholds
`| %-10s` each in the order lnr, lcr, lnc, unc, ucr, unr, "na" where the sensor has none. `sdr
elist` has no thresholds, so the collector reads this table every few rounds (thresholds are
set once by the vendor) for `fan_rpm_lower_critical`.
"""

from __future__ import annotations

LCR_COLUMN = 5  # name, reading, unit, status, lnr, lcr, ...


def parse_lower_critical(text: str) -> dict[str, float]:
    """Sensor name -> lower critical threshold, for the RPM rows that have one."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        cols = [c.strip() for c in raw.split("|")]
        if len(cols) < 10 or cols[2].lower() != "rpm":
            continue
        try:
            out[cols[0]] = float(cols[LCR_COLUMN])
        except ValueError:  # "na"
            continue
    return out
