"""Xid and SXid events from the kernel log (/dev/kmsg, journald, dmesg or syslog files)."""

from collectors.kernel_log.collector import KernelLogCollector
from collectors.kernel_log.parser import KernelLogParser, parse_kernel_log
from collectors.kernel_log.records import ParseResult, SXidRecord, XidEvent, XidRecord
from collectors.kernel_log.sources import FileFollower, JournalFollower, KmsgReader
from collectors.kernel_log.timestamps import TimeContext
from collectors.kernel_log.xid_catalog import XID_CATALOG, Severity, XidInfo, xid_info

__all__ = [
    "XID_CATALOG",
    "FileFollower",
    "JournalFollower",
    "KernelLogCollector",
    "KernelLogParser",
    "KmsgReader",
    "ParseResult",
    "SXidRecord",
    "Severity",
    "TimeContext",
    "XidEvent",
    "XidInfo",
    "XidRecord",
    "parse_kernel_log",
    "xid_info",
]
