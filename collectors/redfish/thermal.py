"""Fans, inlet and exhaust temperatures and fan redundancy, from either Redfish model:

- the newer `ThermalSubsystem` (ThermalSubsystem.v1_1, Fan.v1_3, ThermalMetrics.v1_1,
  Sensor.v1_6): each fan its own resource with `Status` and `SpeedPercent` (an excerpt:
  `Reading` in percent, `SpeedRPM`), its thresholds on the Sensor its `DataSourceUri` names
  (`Thresholds.LowerCritical.Reading`, in the sensor's `ReadingUnits`); inlet and exhaust in
  `ThermalMetrics.TemperatureSummaryCelsius.Intake/Exhaust`; redundancy in
  `ThermalSubsystem.FanRedundancy[]`;
- the older `Thermal` resource (Thermal.v1_7): `Fans[]` with `Reading` and `ReadingUnits`
  ("RPM" or "Percent"; Thermal.v1_0's `ReadingRPM` before that) and `LowerThresholdCritical` in
  the same units; `Temperatures[]` with `ReadingCelsius` and `PhysicalContext` (Intake,
  Exhaust); `Redundancy[]`.

Vendor `Oem` sections are never read. Redfish schema bundle DSP8010, guide DSP2046.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from collectors.redfish.power import redundant
from collectors.redfish.reading import Reading
from collectors.redfish.values import (
    Skips,
    member_id,
    members,
    number,
    obj,
    put_health,
    put_number,
    status,
)

# PhysicalContext is the standard's word; some BMCs put the inlet sensor on "SystemBoard" and
# say where it is only in its Name ("System Board Inlet Temp"), so the name is the fallback.
_CONTEXT = {"Intake": "inlet_temp_c", "Exhaust": "exhaust_temp_c"}
_NAMED = ((re.compile(r"\b(inlet|intake)\b", re.IGNORECASE), "inlet_temp_c"),
          (re.compile(r"\b(exhaust|outlet)\b", re.IGNORECASE), "exhaust_temp_c"))


def read_legacy_thermal(thermal: Mapping[str, Any], out: Reading, skips: Skips,
                        prefix: str = "") -> None:
    for i, raw in enumerate(members(thermal.get("Fans"))):
        where = f"Thermal.Fans[{i}]"
        fan = obj(raw)
        if fan is None:
            skips.skip(where, "not an object", "fan_health")
            continue
        fid = prefix + member_id(fan, i)
        if _absent(fan, f"{where} ({fid})", skips):
            continue
        fields = out.fan(fid)
        put_health(fields, "fan_health", fan, where, skips)
        _legacy_speed(fan, fields, where, skips)
    for i, raw in enumerate(members(thermal.get("Temperatures"))):
        temp = obj(raw)
        if temp is None:
            continue
        metric = _place(temp)
        if metric is None:
            continue  # a CPU, DIMM or board sensor: not in the schema
        where = f"Thermal.Temperatures[{i}]"
        v = number(temp.get("ReadingCelsius"))
        if isinstance(v, float):
            out.temperature(metric, v)
        else:
            skips.skip(where, f"ReadingCelsius {'is missing or null' if v is None else v}",
                       metric)
    out.redundancy("fan_redundant", redundant(members(thermal.get("Redundancy")),
                                              "Thermal.Redundancy", skips))


def _legacy_speed(fan: Mapping[str, Any], fields: dict[str, float | int], where: str,
                  skips: Skips) -> None:
    if "Reading" not in fan and "ReadingRPM" in fan:  # Thermal.v1_0
        put_number(fields, "fan_rpm", fan.get("ReadingRPM"), where, skips, "ReadingRPM")
        put_threshold(fields, fan.get("LowerThresholdCritical"), where, skips)
        return
    units = fan.get("ReadingUnits")
    metric = {"RPM": "fan_rpm", "Percent": "fan_pct"}.get(units) if isinstance(units,
                                                                                str) else None
    if metric is None:
        skips.skip(where, f"ReadingUnits {units!r} is not RPM or Percent: reading not read",
                   "fan_rpm")
        return
    put_number(fields, metric, fan.get("Reading"), where, skips, "Reading")
    if metric == "fan_rpm":
        put_threshold(fields, fan.get("LowerThresholdCritical"), where, skips)


def put_threshold(fields: dict[str, float | int], value: Any, where: str, skips: Skips) -> None:
    """fan_rpm_lower_critical where the BMC has one (absent is normal, not a skip)."""
    v = number(value)
    if isinstance(v, float):
        fields["fan_rpm_lower_critical"] = v
    elif isinstance(v, str):
        skips.skip(where, f"LowerThresholdCritical {v}", "fan_rpm_lower_critical")


def read_subsystem_fan(fan: Mapping[str, Any], sensor: Mapping[str, Any] | None, index: int,
                       out: Reading, skips: Skips, prefix: str = "") -> None:
    """One newer `Fan` resource, and the Sensor behind its SpeedPercent (None when not read)."""
    fid = prefix + member_id(fan, index)
    where = f"Fans/{fid}"
    if _absent(fan, where, skips):
        return
    fields = out.fan(fid)
    put_health(fields, "fan_health", fan, where, skips)
    speed = obj(fan.get("SpeedPercent"))
    if speed is None:
        skips.skip(where, "SpeedPercent is missing or null", "fan_rpm")
        return
    put_number(fields, "fan_pct", speed.get("Reading"), where, skips, "SpeedPercent.Reading")
    if "SpeedRPM" in speed:  # optional: many fans report percent only
        put_number(fields, "fan_rpm", speed.get("SpeedRPM"), where, skips,
                   "SpeedPercent.SpeedRPM")
    if sensor is not None and sensor.get("ReadingUnits") == "RPM":
        limits = obj(sensor.get("Thresholds")) or {}
        crit = obj(limits.get("LowerCritical")) or {}
        put_threshold(fields, crit.get("Reading"), f"{where} sensor", skips)


def read_thermal_metrics(metrics: Mapping[str, Any], out: Reading, skips: Skips) -> None:
    summary = obj(metrics.get("TemperatureSummaryCelsius")) or {}
    for key, metric in _CONTEXT.items():
        excerpt = obj(summary.get(key))
        if excerpt is None:
            continue
        v = number(excerpt.get("Reading"))
        if isinstance(v, float):
            out.temperature(metric, v)
        else:
            skips.skip(f"ThermalMetrics.TemperatureSummaryCelsius.{key}",
                       f"Reading {'is missing or null' if v is None else v}", metric)


def read_fan_redundancy(subsystem: Mapping[str, Any], out: Reading, skips: Skips) -> None:
    out.redundancy("fan_redundant", redundant(members(subsystem.get("FanRedundancy")),
                                              "ThermalSubsystem.FanRedundancy", skips))


def _place(temp: Mapping[str, Any]) -> str | None:
    ctx = temp.get("PhysicalContext")
    if isinstance(ctx, str) and ctx in _CONTEXT:
        return _CONTEXT[ctx]
    name = temp.get("Name")
    if isinstance(name, str):
        for pattern, metric in _NAMED:
            if pattern.search(name):
                return metric
    return None


def _absent(fan: Mapping[str, Any], where: str, skips: Skips) -> bool:
    state, _ = status(fan)
    if state == "Absent":
        skips.notes.append(f"{where}: absent")
        return True
    return False
