"""Collector status as line protocol. A node agent reports each of its collectors every round
as one point, so the service (and an InfluxDB behind it) sees remote collectors as it sees its
own:

    gpuhealth_collector,collector=nvml,host=n001 up=1i,scrape_seconds=0.012,samples=412i,error=""

`up` is 1 or 0, `scrape_seconds` the duration of that round's collect(), `samples` what it
returned, `error` why it is down (empty while up).
"""

from __future__ import annotations

import math

from collectors.compat import dataclass
from collectors.lineprotocol import FieldValue, Point
from collectors.lineprotocol_format import format_line

MEASUREMENT = "gpuhealth_collector"
TAGS = ("host", "collector")
FIELDS = ("up", "scrape_seconds", "samples", "error")
MAX_ERROR = 1_000  # characters of a report's error kept: a diagnostic, remembered per collector


@dataclass(frozen=True, slots=True)
class CollectorReport:
    host: str
    collector: str
    up: bool
    scrape_seconds: float  # NaN when the report did not say
    samples: int
    error: str
    ts: float  # epoch seconds of the round


def status_line(host: str, collector: str, up: bool, scrape_seconds: float, samples: int,
                error: str, ts_ns: int) -> str:
    fields: dict[str, FieldValue] = {"up": int(up), "scrape_seconds": float(scrape_seconds),
                                     "samples": int(samples),
                                     "error": "" if up else _one_line(error)}
    return format_line(MEASUREMENT, {"host": host, "collector": collector}, fields, ts_ns)


def _one_line(text: str) -> str:
    return " ".join(text.split())  # line protocol cannot carry a newline


def read_report(p: Point) -> CollectorReport | str:
    """The report a `gpuhealth_collector` point carries, or why it is refused. Fields other
    than FIELDS are the caller's to judge."""
    host, collector = p.tags.get("host", ""), p.tags.get("collector", "")
    if not host or not collector:
        return f"missing tag {'host' if not host else 'collector'!r}"
    if p.ts_ns is None:
        return "missing timestamp"
    up = p.fields.get("up")
    if type(up) is not int or up not in (0, 1):  # bool and 1u are not the integer 1i
        return f"up must be the integer 1 or 0 (1i or 0i), got {_text(up)}"
    seconds = p.fields.get("scrape_seconds", math.nan)
    if isinstance(seconds, (bool, str)) or seconds < 0:
        return f"scrape_seconds must be a non-negative number, got {_text(seconds)}"
    samples = p.fields.get("samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        return f"samples must be a non-negative integer, got {_text(samples)}"
    error = p.fields.get("error", "")
    if not isinstance(error, str):
        return f"error must be a string, got {_text(error)}"
    return CollectorReport(host, collector, bool(up), float(seconds), int(samples),
                           error[:MAX_ERROR], p.ts_ns / 1e9)


def _text(v: FieldValue | None) -> str:
    return "nothing" if v is None else repr(v)
