"""Values as nvidia-smi prints them, and the Points our parsers build from them.

nvidia-smi spells one reading many ways across drivers and output formats: "27 C", "67.03 W",
"1275 MHz", "0 %", "Active" / "Not Active", "Yes" / "No", "Enabled", and for anything the GPU
or driver does not support "N/A", "[N/A]", "[Not Supported]" or a bracketed sentence. A value
we cannot read is left out (missing is missing, never zero). A number no reading can reach (a
400-digit count, which a float turns into infinity) is refused with its reason: it is a
corrupt output, and line protocol could not carry it anyway.

Each GPU's identity (UUID, serial, bus id, model, VBIOS, driver) is a `gpu_info` point beside
its readings (collectors.identity), cleaned here so "N/A" or "[Unknown Error]" never travels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from collectors import identity
from collectors.frames import Entity, Rejection
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
# No nvidia-smi reading (MiB, mJ, counts) comes near 2**63; past it line protocol cannot carry
# a counter as an integer either.
LIMIT = 2.0**63


class Refused(str):
    """Why a reading that looks like a number was refused (see `reading`)."""


def reading(raw: str | None) -> float | Refused | None:
    """One nvidia-smi reading as a float; None when it is absent or unsupported; Refused (a
    reason) when it is a number out of any reading's range."""
    if raw is None:
        return None
    text = raw.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    word = _WORDS.get(text.lower())
    if word is not None:
        return word
    m = _NUMBER.match(text)
    if m is None:
        return None
    v = float(m.group(1))  # a float, never an OverflowError: too many digits give inf
    if not math.isfinite(v) or abs(v) >= LIMIT:
        digits = m.group(1).lstrip("-")
        return Refused(f"reading {_short(text)} ({len(digits)} digits) is out of range")
    return v


def value(raw: str | None) -> float | None:
    """`reading` without the reason: a refused reading is left out like an absent one."""
    v = reading(raw)
    return None if isinstance(v, Refused) else v


def _short(text: str) -> str:
    return repr(text if len(text) <= 24 else text[:12] + "..." + text[-8:])


# Told of each refused reading: (metric, reason).
Refuse = Callable[[str, str], None]


def refuser(rejected: list[Rejection] | None, host: str, gpu: int) -> Refuse | None:
    """A Refuse that records into `rejected` as one Rejection per reading (None: not kept)."""
    if rejected is None:
        return None
    key = Entity.gpu(host, gpu).key

    def refuse(metric: str, reason: str) -> None:
        rejected.append(Rejection(reason, entity=key, metric=metric))

    return refuse


K = TypeVar("K")


def first_readable(paths: Mapping[str, Sequence[K]], read: Callable[[K], str | None],
                   refuse: Refuse | None = None) -> dict[str, FieldValue]:
    """Per metric, the value at the first of its paths that reads as a number: drivers spell
    the same reading differently, newest spelling first. A refused reading is told to
    `refuse` and the metric left out (an older spelling is not read in its place)."""
    fields: dict[str, FieldValue] = {}
    for name, candidates in paths.items():
        for path in candidates:
            v = reading(read(path))
            if isinstance(v, Refused):
                if refuse is not None:
                    refuse(name, str(v))
                break
            if v is not None:
                fields[name] = v
                break
    return fields


def gpu_point(host: str, gpu: int, fields: dict[str, FieldValue], ts_ns: int) -> Point:
    return Point(GPU_MEASUREMENT, {"host": host, "gpu": str(gpu)}, fields, ts_ns)


def nvlink_point(host: str, gpu: int, link: int, state: float, ts_ns: int) -> Point:
    tags = {"host": host, "gpu": str(gpu), "link": str(link)}
    return Point(NVLINK_MEASUREMENT, tags, {"nvlink_state": state}, ts_ns)


def info_point(host: str, gpu: int, raw: Mapping[str, str | None], ts_ns: int,
               rejected: list[Rejection] | None = None) -> Point | None:
    """The GPU's identity as a `gpu_info` point (fields by collectors.identity.FIELDS name), or
    None when nothing is said. A "no value" spelling ("N/A", "[Unknown Error]") is no value; a
    value identity refuses (a quote, a bus id that is not one) goes to `rejected`, and the
    GPU's other attributes are kept."""
    ident, problems = identity.clean({k: v for k, v in raw.items() if v is not None})
    if rejected is not None and problems:
        key = Entity.gpu(host, gpu).key
        rejected += [Rejection(why, entity=key, metric=why.partition(":")[0])
                     for why in problems]
    said = ident.as_dict()
    if not said:
        return None
    return Point(identity.MEASUREMENT, {"host": host, "gpu": str(gpu)}, dict(said), ts_ns)
