"""Time on the REST API's wire: every resource timestamp leaves as RFC 3339 in UTC with
millisecond precision and a `Z` (`2026-12-01T22:47:27.123Z`), and every time a caller sends
(a query parameter, a body field) may be RFC 3339 or epoch seconds.

Inside the service times stay epoch seconds (floats): only the JSON edge converts, through
`Timestamp` (a float field that serializes as RFC 3339 and is documented as `date-time`) and
`stamp_fields` for the routes that still answer plain dicts. Time-series point arrays
(`times` in the history answers) keep epoch seconds, as InfluxDB and Prometheus do, and the
InfluxDB-compatible ingest paths are InfluxDB's own format."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from service.history.history import parse_time
from service.notify.receivers import webhook

_EXAMPLE = "2026-12-01T22:47:27.123Z"


def rfc3339(ts: float) -> str:
    """Epoch seconds as RFC 3339, UTC, milliseconds, `Z`: as receivers render `startsAt`."""
    return webhook.rfc3339(ts)


def parse_instant(value: str | float | int) -> float:
    """Epoch seconds (`1700000000`, `1700000000.5`) or RFC 3339 with a zone
    (`2023-11-14T22:13:20Z`, `...+02:00`) to epoch seconds; ValueError says what is wrong. One
    parser with the history API's `from`/`to` (service/history/history.py)."""
    if isinstance(value, bool):
        raise ValueError(f"time {value!r} is neither epoch seconds nor RFC 3339 ({_EXAMPLE})")
    return parse_time(repr(float(value)) if isinstance(value, int | float) else value)


def _in(value: object) -> object:
    return parse_instant(value) if isinstance(value, str | int | float) else value


# A resource timestamp: epoch seconds inside, RFC 3339 on the wire (in both directions the
# schema says `date-time`; a body field also takes epoch seconds).
Timestamp = Annotated[
    float,
    BeforeValidator(_in),
    PlainSerializer(rfc3339, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time", "examples": [_EXAMPLE]}),
]

# A time a caller sends: RFC 3339 or epoch seconds.
TimeIn = Annotated[
    float,
    BeforeValidator(_in),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}],
                    "examples": [_EXAMPLE]}),
]

# What a time query parameter's or body field's description says it takes.
TIME_DOC = f"RFC 3339 ({_EXAMPLE}) or epoch seconds"


def stamp_fields(d: Mapping[str, Any], extra: Iterable[str] = ()) -> dict[str, Any]:
    """A dict answer with its timestamps as RFC 3339: keys ending in `_at` and those named in
    `extra` (None stays null). One level deep: nested records are stamped by their caller."""
    named = frozenset(extra)
    out = dict(d)
    for k, v in d.items():
        if (k.endswith("_at") or k in named) and isinstance(v, int | float) \
                and not isinstance(v, bool):
            out[k] = rfc3339(float(v))
    return out
