"""IPMI BMC readings through ipmitool, in band (/dev/ipmi0) or over the LAN (lanplus): power
supplies, fans, inlet and exhaust temperatures, redundancy, and new System Event Log entries."""

from collectors.ipmi.collector import IpmiCollector, Reading
from collectors.ipmi.runner import Target
from collectors.ipmi.sdr import SdrRow, looks_like_sdr_elist, parse_sdr_elist
from collectors.ipmi.sel import SelCursor, SelEntry, looks_like_sel, parse_sel_elist
from collectors.ipmi.sensors import Mapped, map_rows
from collectors.ipmi.thresholds import parse_lower_critical

__all__ = [
    "IpmiCollector",
    "Mapped",
    "Reading",
    "SdrRow",
    "SelCursor",
    "SelEntry",
    "Target",
    "looks_like_sdr_elist",
    "looks_like_sel",
    "map_rows",
    "parse_lower_critical",
    "parse_sdr_elist",
    "parse_sel_elist",
]
