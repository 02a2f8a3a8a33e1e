"""Values as nvidia-smi prints them, and the Points our parsers build from them.

nvidia-smi spells one reading many ways across drivers and output formats: "27 C", "67.03 W",
"1275 MHz", "0 %", "Active" / "Not Active", "Yes" / "No", "Enabled", and for anything the GPU
or driver does not support "N/A", "[N/A]", "[Not Supported]" or a bracketed sentence. A value
we cannot read is left out (missing is missing, never zero).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from collectors.lineprotocol import FieldValue, Point

GPU_MEASUREMENT = "gpu"
NVLINK_MEASUREMENT = "nvlink"


class SmiParseError(ValueError):
    """nvidia-smi output that cannot be read at all (garbage, truncated XML, no GPU found).
    The collector turns it into up=False with this message."""


_WORDS: Mapping[str, float] = {
    "yes": 1.0, "no": 0.0,
    "active": 1.0, "not active": 0.0,
    "enabled": 1.0, "disabled": 0.0,
    "true": 1.0, "false": 0.0,
}
# A number followed by an optional unit ("27 C", "67.03 W", "0 %", "16x", "192 bank(s)").
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/()]+)?$")


def value(raw: str | None) -> float | None:
    """One nvidia-smi reading as a float, or None when it is absent or unsupported."""
    if raw is None:
        return None
    text = raw.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    word = _WORDS.get(text.lower())
    if word is not None:
        return word
    m = _NUMBER.match(text)
    return float(m.group(1)) if m else None


K = TypeVar("K")


def first_readable(paths: Mapping[str, Sequence[K]],
                   read: Callable[[K], str | None]) -> dict[str, FieldValue]:
    """Per metric, the value at the first of its paths that reads as a number: drivers spell
    the same reading differently, newest spelling first."""
    fields: dict[str, FieldValue] = {}
    for name, candidates in paths.items():
        for path in candidates:
            v = value(read(path))
            if v is not None:
                fields[name] = v
                break
    return fields


def gpu_point(host: str, gpu: int, fields: dict[str, FieldValue], ts_ns: int) -> Point:
    return Point(GPU_MEASUREMENT, {"host": host, "gpu": str(gpu)}, fields, ts_ns)


def nvlink_point(host: str, gpu: int, link: int, state: float, ts_ns: int) -> Point:
    tags = {"host": host, "gpu": str(gpu), "link": str(link)}
    return Point(NVLINK_MEASUREMENT, tags, {"nvlink_state": state}, ts_ns)
