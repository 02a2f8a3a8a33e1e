"""A dcgm-exporter `/metrics` page (Prometheus text exposition) to points in our own schema.

Each DCGM_FI_* sample carries its GPU in the `gpu` label (plus `UUID`, `pci_bus_id`, `Hostname`)
and becomes a field of a `gpu` point, or of an `nvlink` point for per-link fields. The GPU's
identity in its labels (`UUID`, `pci_bus_id`, `modelName`, and the fields dcgm-exporter's CSV
makes labels: `DCGM_FI_DRIVER_VERSION`, `DCGM_FI_DEV_SERIAL`, `DCGM_FI_DEV_VBIOS_VERSION`;
dcgm-exporter's README, "Changing Metrics") becomes one `gpu_info` point per GPU and page
(collectors.identity). A MIG instance's samples carry its parent GPU's labels: one identity.
Fields with no catalog home are counted in ParseStats, not rejected: a default dcgm-exporter page
is mostly utilization and memory gauges that this service does not track.

DCGM_FI_DEV_XID_ERRORS holds the *last* Xid code seen on the GPU (0 before any), not an event per
Xid. It is passed on as an `xid` point carrying that last value; DcgmExporterCollector keeps the
value between scrapes and turns a change into an event. Used on its own, the parser's `xid`
points are readings, not events.

The node is the collector's `host` when set, else the sample's `Hostname` label unless that is a
known exporter's pod name (collectors.node_names: under the GPU operator without NODE_NAME,
dcgm-exporter's own pod): such samples are refused, one rejection per pod name and page.

The page is read line by line (promtext): a bad line is refused with its line number and costs
only its own sample, so a page cut in its last sample still gives every sample before it.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import field
from typing import Optional

from collectors import identity
from collectors.catalog import Kind, Scope
from collectors.compat import dataclass
from collectors.dcgm.fields import FIELDS, FieldMap
from collectors.dcgm.promtext import read_samples
from collectors.frames import Rejection
from collectors.lineprotocol import FieldValue, Point
from collectors.node_names import pod_reason

log = logging.getLogger(__name__)

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
_XID_MEASUREMENT = "xid"
_XID_CODE = "code"
_PREFIX = "DCGM_FI_"
# Under MIG, utilization describes one instance, not the board; every other GPU metric in the
# catalog (temperature, power, ECC, remaps, Xid, NVLink) is a property of the physical GPU and
# reads the same from each instance, so it folds into the GPU with the instance as a tag.
_PER_INSTANCE = frozenset({"gpu_util"})


class ExpositionError(ValueError):
    """No line of the page is a sample and some line is not exposition (an HTML error page)."""


@dataclass(slots=True)
class ParseStats:
    samples: int = 0  # DCGM_FI_* samples seen
    mapped: int = 0  # of those, the ones that became a field or an Xid reading
    unknown: Counter[str] = field(default_factory=Counter)  # DCGM fields with no catalog home
    skipped: Counter[str] = field(default_factory=Counter)  # known fields left out, by reason


_Key = tuple[str, str, str, Optional[str], Optional[str]]  # measurement, host, gpu, link, mig


def parse_exposition(
    text: str, host: str | None, ts_ns: int, *, stats: ParseStats | None = None,
    fields: FieldMap = FIELDS, rejected: list[Rejection] | None = None,
) -> list[Point]:
    """Points for the DCGM fields the catalog knows, and each GPU's `gpu_info`. `host` names
    the node; None takes it from each sample's `Hostname` label. A bad line (a page cut in a
    sample, a garbled label) is appended to `rejected` with its line number and the samples
    around it are still read; when no line of the page is a sample and some line is bad, the
    page is not exposition at all and ExpositionError says why."""
    st = stats if stats is not None else ParseStats()
    refused: list[Rejection] = []
    points: dict[_Key, Point] = {}
    pods: dict[str, tuple[int, int]] = {}  # refusal reason -> first line, samples
    read = 0
    for sample in read_samples(text, refused):
        read += 1
        if not sample.name.startswith(_PREFIX):
            continue
        st.samples += 1
        named = sample.labels.get("Hostname")
        why = None if host is not None or not named else pod_reason("Hostname", named)
        if why is not None:
            first, n = pods.get(why, (sample.line, 0))
            pods[why] = (first, n + 1)
            st.skipped["named by a pod name, not a node"] += 1
            continue
        _one(points, st, fields, sample.name, sample.labels, sample.value, host, ts_ns)
    for why, (first, n) in pods.items():
        refused.append(Rejection(f"{why} ({n} sample{'s' if n > 1 else ''} refused)", first))
    if refused and not read:
        raise ExpositionError(f"not Prometheus text exposition: {refused[0]}")
    if refused:
        log.debug("%d line(s) of the page refused, the first: %s", len(refused), refused[0])
    if rejected is not None:
        rejected += refused
    return list(points.values())


def _one(points: dict[_Key, Point], st: ParseStats, fields: FieldMap, name: str,
         labels: dict[str, str], value: float, host: str | None, ts_ns: int) -> None:
    node = host if host is not None else labels.get("Hostname")
    gpu = labels.get("gpu")
    if not node or gpu is None:
        st.skipped["no host or gpu label"] += 1
        return
    info: _Key = (identity.MEASUREMENT, node, gpu, None, None)
    if info not in points:
        said = identity.dcgm_fields(labels)
        if said:
            points[info] = Point(identity.MEASUREMENT, {"host": node, "gpu": gpu}, dict(said),
                                 ts_ns)
    if not math.isfinite(value):
        st.skipped["value is not finite"] += 1
        return
    mig = labels.get("GPU_I_ID") or None
    if name == XID_FIELD:
        st.mapped += 1
        _put(points, (_XID_MEASUREMENT, node, gpu, None, mig), _XID_CODE, int(value), ts_ns)
        return
    found = fields.lookup(name)
    if found is None:
        if fields.is_link_total(name):
            st.skipped["NVLink total over all links (the catalog keeps links apart)"] += 1
        else:
            st.unknown[name] += 1
        return
    used = False
    for target in found.targets:
        m = target.metric
        if mig is not None and m.name in _PER_INSTANCE:
            st.skipped[f"{m.name} of a MIG instance (not the GPU's)"] += 1
            continue
        v: FieldValue
        if target.mask is not None:
            v = 1 if int(value) & target.mask else 0
        elif m.kind is not Kind.GAUGE and value.is_integer():
            v = int(value)
        else:
            v = float(value)
        if m.scope is Scope.NVLINK:
            key: _Key = (Scope.NVLINK.value, node, gpu, str(found.link), mig)
        else:
            key = (Scope.GPU.value, node, gpu, None, mig)
        _put(points, key, m.name, v, ts_ns)
        used = True
    if used:
        st.mapped += 1


def _put(points: dict[_Key, Point], key: _Key, name: str, value: FieldValue, ts_ns: int
         ) -> None:
    p = points.get(key)
    if p is None:
        measurement, node, gpu, link, mig = key
        tags = {"host": node, "gpu": gpu}
        if link is not None:
            tags["link"] = link
        if mig is not None:
            tags["mig"] = mig
        p = points[key] = Point(measurement, tags, {}, ts_ns)
    p.fields[name] = value
