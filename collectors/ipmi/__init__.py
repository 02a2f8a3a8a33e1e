"""IPMI BMC readings through ipmitool or freeipmi, in band (/dev/ipmi0) or over the LAN
(lanplus): power supplies, fans, inlet and exhaust temperatures, redundancy, and new System Event
Log entries."""

from collectors.ipmi.collector import IpmiCollector, Reading
from collectors.ipmi.freeipmi_sel import looks_like_sel_csv, parse_sel_csv
from collectors.ipmi.freeipmi_sensors import (
    Placement,
    SensorsListing,
    looks_like_sensors_csv,
    parse_placements,
    parse_sensors_csv,
)
from collectors.ipmi.runner import Target
from collectors.ipmi.sdr import SdrRow, looks_like_sdr_elist, parse_sdr_elist
from collectors.ipmi.sel import SelCursor, SelEntry, looks_like_sel, parse_sel_elist
from collectors.ipmi.sensors import Mapped, map_rows
from collectors.ipmi.thresholds import parse_lower_critical

__all__ = [
    "IpmiCollector",
    "Mapped",
    "Placement",
    "Reading",
    "SdrRow",
    "SelCursor",
    "SelEntry",
    "SensorsListing",
    "Target",
    "looks_like_sdr_elist",
    "looks_like_sel",
    "looks_like_sel_csv",
    "looks_like_sensors_csv",
    "map_rows",
    "parse_lower_critical",
    "parse_placements",
    "parse_sdr_elist",
    "parse_sel_csv",
    "parse_sel_elist",
    "parse_sensors_csv",
]
