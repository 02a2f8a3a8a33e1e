"""Power supplies and power redundancy, from either Redfish model of a chassis:

- the newer `PowerSubsystem` (PowerSubsystem.v1_1, PowerSupply.v1_5, PowerSupplyMetrics.v1_0):
  each supply its own resource with `Status`, and its `Metrics` with `InputVoltage`,
  `OutputPowerWatts` and `TemperatureCelsius` (each an excerpt with `Reading`); redundancy in
  `PowerSubsystem.PowerSupplyRedundancy[]` (RedundantGroup: `Status`);
- the older `Power` resource (Power.v1_7, deprecated in 2020.4 but still what many BMCs serve):
  `PowerSupplies[]` with `Status`, `LineInputVoltage`, `PowerOutputWatts` or
  `LastPowerOutputWatts`; `Redundancy[]` (Redundancy.v1_4: `Status`, `Mode`).

Vendor `Oem` sections are never read. Redfish schema bundle DSP8010; the model in DSP0266 and the
Redfish Resource and Schema Guide DSP2046.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collectors.redfish.reading import Reading
from collectors.redfish.values import (
    PSU_STATE,
    PSU_STATE_OTHER,
    Skips,
    member_id,
    members,
    obj,
    put_health,
    put_number,
    status,
)

# Redundancy.v1 / RedundantGroup: a group whose State is one of these is not in use (not
# configured, or switched off by the operator): it says nothing about lost redundancy.
_NOT_IN_USE = frozenset(("Disabled", "StandbyOffline", "Absent"))


def psu_fields(supply: Mapping[str, Any], where: str, skips: Skips) -> dict[str, float | int]:
    """psu_health and psu_state of one supply (either model: both carry `Status`)."""
    fields: dict[str, float | int] = {}
    state, _ = status(supply)
    if state is None:
        skips.skip(where, "Status.State is missing or null", "psu_state")
    else:
        fields["psu_state"] = PSU_STATE.get(state, PSU_STATE_OTHER)
    if state != "Absent":  # an empty bay has no health to report
        put_health(fields, "psu_health", supply, where, skips)
    return fields


def read_legacy_power(power: Mapping[str, Any], out: Reading, skips: Skips,
                      prefix: str = "") -> None:
    """The older `Power` resource: every supply and the redundancy groups."""
    for i, supply in enumerate(members(power.get("PowerSupplies"))):
        m = obj(supply)
        psu = prefix + (member_id(m, i) if m is not None else str(i))
        where = f"Power.PowerSupplies[{i}]"
        if m is None:
            skips.skip(where, "not an object", "psu_state")
            continue
        fields = psu_fields(m, where, skips)
        if fields.get("psu_state") != PSU_STATE["Absent"]:
            put_number(fields, "psu_input_v", m.get("LineInputVoltage"), where, skips,
                       "LineInputVoltage")
            watts = m.get("PowerOutputWatts", m.get("LastPowerOutputWatts"))
            put_number(fields, "psu_output_w", watts, where, skips, "LastPowerOutputWatts")
        out.psu(psu).update(fields)
    out.redundancy("psu_redundant", redundant(members(power.get("Redundancy")),
                                              "Power.Redundancy", skips))


def read_subsystem_supply(supply: Mapping[str, Any], metrics: Mapping[str, Any] | None,
                          index: int, out: Reading, skips: Skips, prefix: str = "") -> None:
    """One newer `PowerSupply` and its `PowerSupplyMetrics` (None when it has none)."""
    psu = prefix + member_id(supply, index)
    where = f"PowerSupplies/{psu}"
    fields = psu_fields(supply, where, skips)
    if metrics is not None:
        for metric, key in (("psu_input_v", "InputVoltage"), ("psu_output_w", "OutputPowerWatts"),
                            ("psu_temp_c", "TemperatureCelsius")):
            excerpt = obj(metrics.get(key))
            if excerpt is not None:
                put_number(fields, metric, excerpt.get("Reading"), f"{where}/Metrics", skips,
                           f"{key}.Reading")
    elif fields.get("psu_state") != PSU_STATE["Absent"]:
        skips.notes.append(f"{where}: no Metrics resource (voltage, output and temperature "
                           "not read)")
    out.psu(psu).update(fields)


def redundant(groups: Sequence[Any], where: str, skips: Skips) -> int | None:
    """1 while every group in use is whole, 0 when one has lost redundancy (Health Warning or
    Critical, or State UnavailableOffline/Degraded: the set cannot fail over), None when no
    group is in use or none says."""
    verdicts: list[int] = []
    for i, g in enumerate(groups):
        group = obj(g)
        if group is None or "Status" not in group:  # a bare @odata.id reference
            continue
        state, health = status(group)
        if state in _NOT_IN_USE:
            skips.notes.append(f"{where}[{i}]: redundancy group {state} (not in use)")
            continue
        if state in ("UnavailableOffline", "Degraded") or health in ("Warning", "Critical"):
            verdicts.append(0)
        elif health == "OK":
            verdicts.append(1)
        else:
            skips.skip(f"{where}[{i}]", "Status.Health is missing or null")
    return min(verdicts) if verdicts else None
