"""What to read of one BMC, and reading it.

Discovery (the first read, then every `rediscover_every` reads or after a planned resource
vanished) follows the service root: each `Chassis` member's links to `PowerSubsystem` or
`Power` and `ThermalSubsystem` or `Thermal`, each fan's threshold Sensor (thresholds change
rarely: read at discovery only), and the event logs: `LogServices` of every `Managers` and
`Systems` member whose `LogEntryType` is not OEM. A cycle then reads only those resources, one
request at a time on the BMC's one connection (never hammer a BMC).

Per chassis the newer model is read when the chassis links it (`model="auto"`), else the older:
BMCs that serve both describe the same fans and supplies twice, under different ids. A resource
that fails (404, 500, not JSON) costs its own readings, with the reason; a transport failure or
refused credentials fail the whole read (the poller reports the BMC unreachable).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import Any, Literal, Optional

from collectors.compat import dataclass
from collectors.redfish.client import RedfishError, safe_path
from collectors.redfish.power import read_legacy_power, read_subsystem_supply, redundant
from collectors.redfish.reading import Reading
from collectors.redfish.sel import SelCursor
from collectors.redfish.thermal import (
    read_fan_redundancy,
    read_legacy_thermal,
    read_subsystem_fan,
    read_thermal_metrics,
)
from collectors.redfish.values import Skips, member_id, members, obj

Fetch = Callable[[str, Optional[str]], Awaitable[tuple[Any, Optional[str]]]]  # (path, etag)
Model = Literal["auto", "subsystem", "legacy"]
ROOT = "/redfish/v1"
MAX_MEMBERS = 64  # of one collection (chassis, supplies, fans, log services)
MAX_LOG_PAGES = 8  # of one log's Entries (Members@odata.nextLink)


@dataclass(slots=True)
class ChassisPlan:
    path: str
    prefix: str  # before each sensor id when several chassis carry supplies or fans
    power: str | None = None
    power_subsystem: str | None = None
    thermal: str | None = None
    thermal_subsystem: str | None = None
    thresholds: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # sensor path


@dataclass(slots=True)
class Plan:
    chassis: list[ChassisPlan] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)  # Entries collection paths


class _Gone(Exception):
    """A planned resource answered 404: the BMC changed; discover again next read."""


class BmcReader:
    """Reads one BMC; keeps its plan, its logs' ETags and its SEL cursor between reads."""

    def __init__(self, host: str, *, since_ns: int, model: Model = "auto",
                 rediscover_every: int = 60) -> None:
        self.host = host
        self.model = model
        self.rediscover_every = rediscover_every
        self.plan: Plan | None = None
        self.sel = SelCursor(since_ns)
        self._reads = 0
        self._etags: dict[str, str] = {}

    async def read(self, fetch: Fetch, now_ns: int) -> tuple[Reading, Skips]:
        skips = Skips(self.host)
        out = Reading()
        if self.plan is None or self._reads % self.rediscover_every == 0:
            self.plan = await discover(fetch, skips, self.model)
        self._reads += 1
        for c in self.plan.chassis:
            try:
                await _read_chassis(fetch, c, out, skips)
            except _Gone as exc:
                skips.skip(c.path, f"{exc}; the BMC is discovered again next read")
                self._reads = 0
        for log in self.plan.logs:
            try:
                await self._read_log(fetch, log, now_ns, out, skips)
            except _Gone as exc:
                skips.skip(log, f"{exc}; the BMC is discovered again next read")
                self._reads = 0
        return out, skips

    async def _read_log(self, fetch: Fetch, path: str, now_ns: int, out: Reading,
                        skips: Skips) -> None:
        entries: list[Any] = []
        page: str | None = path
        for n in range(MAX_LOG_PAGES):
            assert page is not None
            got = await _get(fetch, page, skips, self._etags.get(path) if n == 0 else None)
            if got is None:
                return  # unchanged since the last read (304), or refused (skipped with why)
            data, tag = got
            if n == 0 and tag:
                self._etags[path] = tag
            entries += members(data.get("Members"))
            page = safe_path(data.get("Members@odata.nextLink"))
            if page is None:
                break
        self.sel.update(path, entries, now_ns, out, skips)


async def _get(fetch: Fetch, path: str, skips: Skips,
               etag: str | None = None) -> tuple[Mapping[str, Any], str | None] | None:
    """The resource, or None (skipped with why) when the BMC refused this one resource.
    None too for a 304 (the caller passed `etag`)."""
    try:
        data, tag = await fetch(path, etag)
    except RedfishError as exc:
        if exc.status in (401, 403):
            raise
        if exc.status == 404:
            raise _Gone(f"{path}: HTTP 404") from None
        skips.skip(path, str(exc).split(": ", 1)[-1])
        return None
    if data is None:
        return None
    if not isinstance(data, Mapping):
        skips.skip(path, "not a JSON object")
        return None
    return data, tag


def link(resource: Mapping[str, Any], key: str) -> str | None:
    return safe_path((obj(resource.get(key)) or {}).get("@odata.id"))


async def collection(fetch: Fetch, path: str, skips: Skips) -> list[Mapping[str, Any]]:
    """The members of a collection, each fetched unless the BMC expanded it in place."""
    got = await _get(fetch, path, skips)
    if got is None:
        return []
    raw = members(got[0].get("Members"))
    if len(raw) > MAX_MEMBERS:
        skips.notes.append(f"{path}: {len(raw)} members, the first {MAX_MEMBERS} read")
    out: list[Mapping[str, Any]] = []
    for m in raw[:MAX_MEMBERS]:
        member = obj(m)
        if member is None:
            continue
        if len(member) > 2 and "Status" in member:  # expanded ($expand, or the BMC's habit)
            out.append(member)
            continue
        sub = safe_path(member.get("@odata.id"))
        if sub is None:
            skips.skip(path, f"member link {str(member.get('@odata.id'))[:80]!r} refused")
            continue
        try:
            got_member = await _get(fetch, sub, skips)
        except _Gone:
            skips.skip(sub, "HTTP 404")
            continue
        if got_member is not None:
            out.append(got_member[0])
    return out


async def discover(fetch: Fetch, skips: Skips, model: Model = "auto") -> Plan:
    plan = Plan()
    got = await _get(fetch, ROOT, skips)
    if got is None:
        return plan
    root = got[0]
    chassis_path = link(root, "Chassis")
    found: list[ChassisPlan] = []
    for ch in await collection(fetch, chassis_path, skips) if chassis_path else []:
        cid = member_id(ch, len(found))
        path = safe_path(ch.get("@odata.id")) or f"Chassis/{cid}"
        c = ChassisPlan(path, "")
        new_power, old_power = link(ch, "PowerSubsystem"), link(ch, "Power")
        new_thermal, old_thermal = link(ch, "ThermalSubsystem"), link(ch, "Thermal")
        if model != "legacy":
            c.power_subsystem, c.thermal_subsystem = new_power, new_thermal
        if model == "legacy" or (model == "auto" and new_power is None):
            c.power = old_power
        if model == "legacy" or (model == "auto" and new_thermal is None):
            c.thermal = old_thermal
        if any((c.power, c.power_subsystem, c.thermal, c.thermal_subsystem)):
            c.prefix = f"{cid}-"
            found.append(c)
    if len(found) == 1:
        found[0].prefix = ""
    for c in found:
        if c.thermal_subsystem:
            await _thresholds(fetch, c, skips)
    plan.chassis = found
    for key in ("Managers", "Systems"):
        where = link(root, key)
        for owner in await collection(fetch, where, skips) if where else []:
            services = link(owner, "LogServices")
            for svc in await collection(fetch, services, skips) if services else []:
                kind = svc.get("LogEntryType")
                entries = link(svc, "Entries")
                if isinstance(kind, str) and kind.upper() == "OEM":
                    skips.notes.append(f"{services}: {svc.get('Id')!s:.40} holds OEM entries "
                                       "(not read)")
                elif entries:
                    plan.logs.append(entries)
    return plan


async def _thresholds(fetch: Fetch, c: ChassisPlan, skips: Skips) -> None:
    """Each fan's Sensor (its SpeedPercent.DataSourceUri) that reads in RPM: the thresholds."""
    assert c.thermal_subsystem is not None
    got = await _get(fetch, c.thermal_subsystem, skips)
    fans = link(got[0], "Fans") if got else None
    for fan in await collection(fetch, fans, skips) if fans else []:
        sensor = safe_path((obj(fan.get("SpeedPercent")) or {}).get("DataSourceUri"))
        if sensor is None:
            continue
        try:
            got_sensor = await _get(fetch, sensor, skips)
        except _Gone:
            continue
        if got_sensor is not None and got_sensor[0].get("ReadingUnits") == "RPM":
            c.thresholds[sensor] = got_sensor[0]


async def _read_chassis(fetch: Fetch, c: ChassisPlan, out: Reading, skips: Skips) -> None:
    if c.power and (got := await _get(fetch, c.power, skips)):
        read_legacy_power(got[0], out, skips, c.prefix)
    if c.power_subsystem and (got := await _get(fetch, c.power_subsystem, skips)):
        sub = got[0]
        out.redundancy("psu_redundant", redundant(members(sub.get("PowerSupplyRedundancy")),
                                                  "PowerSubsystem.PowerSupplyRedundancy",
                                                  skips))
        supplies = link(sub, "PowerSupplies")
        for i, supply in enumerate(await collection(fetch, supplies, skips) if supplies else []):
            metrics_path = link(supply, "Metrics")
            metrics = await _get(fetch, metrics_path, skips) if metrics_path else None
            read_subsystem_supply(supply, metrics[0] if metrics else None, i, out, skips,
                                  c.prefix)
    if c.thermal and (got := await _get(fetch, c.thermal, skips)):
        read_legacy_thermal(got[0], out, skips, c.prefix)
    if c.thermal_subsystem and (got := await _get(fetch, c.thermal_subsystem, skips)):
        sub = got[0]
        read_fan_redundancy(sub, out, skips)
        fans = link(sub, "Fans")
        for i, fan in enumerate(await collection(fetch, fans, skips) if fans else []):
            sensor = safe_path((obj(fan.get("SpeedPercent")) or {}).get("DataSourceUri"))
            read_subsystem_fan(fan, c.thresholds.get(sensor or ""), i, out, skips, c.prefix)
        metrics_path = link(sub, "ThermalMetrics")
        if metrics_path and (got := await _get(fetch, metrics_path, skips)):
            read_thermal_metrics(got[0], out, skips)
