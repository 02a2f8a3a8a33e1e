"""Telegraf's `prometheus` input scraping dcgm-exporter, turned into our own schema.

Telegraf writes a scraped metric either as its own measurement with the value in a field named
by its type (metric_version 1: `DCGM_FI_DEV_GPU_TEMP,gpu=0,UUID=... gauge=41`) or as fields of
one `prometheus` measurement (metric_version 2: `prometheus,gpu=0 DCGM_FI_DEV_GPU_TEMP=41`).
Both become `gpu` / `nvlink` points here. DCGM_FI_DEV_XID_ERRORS holds the last Xid's code on
every scrape, so it becomes an `xid` event only when it changes to a new non-zero code (the
first value seen for a GPU is a baseline, as the dcgm-exporter collector's XidTracker does).

Each GPU's identity in the exporter's labels (`UUID`, `modelName`, `pci_bus_id`,
`DCGM_FI_DRIVER_VERSION`, ...) becomes one `gpu_info` point per GPU and call.

The node is named by the first label of `order` (`ingest.node_name_from`; Telegraf's `host`,
then dcgm-exporter's `Hostname`) whose value is not a known exporter's pod name
(collectors.node_names); a point with only a pod name is refused with the reason, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Optional

from collectors import identity
from collectors.catalog import Scope
from collectors.lineprotocol import FieldValue, Point
from collectors.node_names import DEFAULT_ORDER, pick

if TYPE_CHECKING:
    from collectors.dcgm.fields import FieldMap

Refuse = Callable[[Point, str, Optional[str]], None]
_VALUE_FIELDS = ("gauge", "counter", "value", "untyped")
_XID = "DCGM_FI_DEV_XID_ERRORS"
_PREFIX = "DCGM_FI_"


@cache
def _fields() -> FieldMap:
    # Imported late: the dcgm package's collector imports the schema mapper, which imports this.
    from collectors.dcgm.fields import FIELDS

    return FIELDS


def is_prometheus(p: Point) -> bool:
    return p.measurement.startswith(_PREFIX) or p.measurement == "prometheus"


def _one(name: str, value: FieldValue, p: Point, host: str, last_xid: dict[tuple[str, str], int],
         refuse: Refuse | None) -> Iterator[Point]:
    gpu = p.tags.get("gpu")
    if gpu is None:
        return
    if isinstance(value, (bool, str)):
        # A Prometheus sample is a number: a boolean (`true` would read as 1, one DBE) or a
        # string on a field we read is a sender's type error, refused and said, not dropped.
        if refuse is not None and (name == _XID or _fields().lookup(name) is not None):
            shown = str(value).lower() if isinstance(value, bool) else repr(value[:40])
            refuse(p, f"{name} value {shown} is not a number (a "
                      f"{'boolean' if isinstance(value, bool) else 'string'})", name)
        return
    if name == _XID:
        code, before = int(value), last_xid.get((host, gpu))
        last_xid[(host, gpu)] = code
        if before is not None and code and code != before:
            yield Point("xid", {"host": host, "gpu": gpu}, {"code": int(value)}, p.ts_ns, p.line,
                        p.source)
        return
    found = _fields().lookup(name)
    if found is None:
        return
    for t in found.targets:
        v: FieldValue = value
        if t.mask is not None:
            v = 1 if int(value) & t.mask else 0
        if t.metric.scope is Scope.NVLINK and found.link is not None:
            yield Point("nvlink", {"host": host, "gpu": gpu, "link": str(found.link)},
                        {t.metric.name: v}, p.ts_ns, p.line, p.source)
        elif t.metric.scope is Scope.GPU:
            yield Point("gpu", {"host": host, "gpu": gpu}, {t.metric.name: v}, p.ts_ns, p.line,
                        p.source)


def translate(points: Iterable[Point], last_xid: dict[tuple[str, str], int],
              refuse: Refuse | None = None,
              order: Sequence[str] = DEFAULT_ORDER) -> Iterator[Point]:
    """Our-schema points for Telegraf prometheus points; every other point passes through.
    DCGM fields the catalog has no home for are dropped, as the dcgm-exporter collector does.
    `last_xid` is the caller's memory of each GPU's last Xid value between calls; `refuse`
    hears of each value of a field we read that is not a number, and of each point whose only
    node name is a pod name (point, reason, field); `order` is the labels that may name the
    node, first first."""
    said: set[tuple[str, str]] = set()  # GPUs whose identity this call has passed on
    for p in points:
        if not is_prometheus(p):
            yield p
            continue
        if p.measurement == "prometheus" and not any(k.startswith(_PREFIX) for k in p.fields):
            continue  # another exporter's page: nothing of ours, whatever names it
        host, why = pick(p.tags, order)
        if host is None:
            if why is not None and refuse is not None:
                refuse(p, why, None)
            continue
        gpu = p.tags.get("gpu")
        if gpu is not None and (host, gpu) not in said:
            said.add((host, gpu))
            raw = identity.dcgm_fields(p.tags)
            if raw:
                yield Point(identity.MEASUREMENT, {"host": host, "gpu": gpu}, dict(raw), p.ts_ns,
                            p.line, p.source)
        if p.measurement == "prometheus":
            for name, value in p.fields.items():
                if name.startswith(_PREFIX):
                    yield from _one(name, value, p, host, last_xid, refuse)
        else:
            found = next((p.fields[f] for f in _VALUE_FIELDS if f in p.fields), None)
            if found is not None:
                yield from _one(p.measurement, found, p, host, last_xid, refuse)
