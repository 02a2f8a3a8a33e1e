"""Reading captured Redfish output (for `gpuhealth parse redfish` and tests): a mockup tree as
the DMTF publishes them (each resource at `<path under /redfish/v1>/index.json`, the layout
the Redfish-Mockup-Server and sushy-static serve), or one saved resource, told apart by its
`@odata.type`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.lineprotocol import Point
from collectors.redfish.client import RedfishError
from collectors.redfish.power import read_legacy_power, read_subsystem_supply, redundant
from collectors.redfish.reading import Reading
from collectors.redfish.sel import SelCursor
from collectors.redfish.thermal import (
    read_fan_redundancy,
    read_legacy_thermal,
    read_subsystem_fan,
    read_thermal_metrics,
)
from collectors.redfish.values import Skips, members
from collectors.redfish.walk import ROOT, BmcReader, Fetch, Model


def tree_fetch(root: Path) -> Fetch:
    """A fetch that answers from a mockup directory: 404 for what it lacks."""
    async def fetch(path: str, etag: str | None = None) -> tuple[Any, str | None]:
        rel = path[len(ROOT):].strip("/")
        file = root.joinpath(*rel.split("/")) / "index.json" if rel else root / "index.json"
        if not file.is_file() or ".." in rel.split("/"):
            raise RedfishError(f"mockup GET {path}: HTTP 404", 404)
        try:
            return json.loads(file.read_text(encoding="utf-8")), None
        except ValueError:
            raise RedfishError(f"mockup GET {path}: not JSON", 200) from None
    return fetch


def read_tree(root: Path, host: str, ts_ns: int, model: Model = "auto",
              since_ns: int = 0) -> tuple[list[Point], Skips]:
    """Every reading of a mockup tree; SEL entries created at or after `since_ns` are events."""
    reader = BmcReader(host, since_ns=since_ns, model=model)
    reading, skips = asyncio.run(reader.read(tree_fetch(root), ts_ns))
    return reading.points(host, ts_ns), skips


def read_resource(data: Mapping[str, Any], host: str, ts_ns: int,
                  since_ns: int = 0) -> tuple[list[Point], Skips]:
    """One saved resource: Power, Thermal, PowerSubsystem or ThermalSubsystem (redundancy),
    PowerSupply, Fan, ThermalMetrics or a LogEntryCollection. ValueError for anything else."""
    kind = str(data.get("@odata.type", "")).lstrip("#").split(".", 1)[0]
    out, skips = Reading(), Skips(host)
    if kind == "Power":
        read_legacy_power(data, out, skips)
    elif kind == "Thermal":
        read_legacy_thermal(data, out, skips)
    elif kind == "PowerSupply":
        read_subsystem_supply(data, None, 0, out, skips)
    elif kind == "Fan":
        read_subsystem_fan(data, None, 0, out, skips)
    elif kind == "ThermalMetrics":
        read_thermal_metrics(data, out, skips)
    elif kind == "ThermalSubsystem":
        read_fan_redundancy(data, out, skips)
    elif kind == "PowerSubsystem":
        out.redundancy("psu_redundant", redundant(members(data.get("PowerSupplyRedundancy")),
                                                  "PowerSubsystem.PowerSupplyRedundancy",
                                                  skips))
    elif kind == "LogEntryCollection":
        SelCursor(since_ns).update("Entries", members(data.get("Members")), ts_ns, out, skips)
    else:
        raise ValueError(f"@odata.type {kind or 'missing'!r} is not a Redfish resource this "
                         "source reads (Power, Thermal, PowerSupply, Fan, ThermalMetrics, "
                         "PowerSubsystem, ThermalSubsystem, LogEntryCollection)")
    return out.points(host, ts_ns), skips
