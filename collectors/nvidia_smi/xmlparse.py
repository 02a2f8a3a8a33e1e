"""`nvidia-smi -q -x` (DTD v10 to v13, with or without a DOCTYPE line) to Points.

Each catalog GPU metric names its element path under <gpu> (Metric.smi_xml, the newest
spelling); older DTDs spell some of them differently, so each metric gets a list of paths and
the first one holding a readable value wins. GPUs are numbered in document order, which is
nvidia-smi's own index order, so XML and `--query-gpu` rows of one GPU line up.

Each <gpu> also gets `gpu_unreadable` (collectors.nvidia_smi.states): an element printing "GPU
requires reset" or "GPU is lost", or a core reading (or the bus id in its `id` attribute)
printing "Unknown Error", is a GPU nvidia-smi cannot read.

Each <gpu> also gets a `gpu_info` point (collectors.identity): its `product_name`, `uuid`,
`serial`, `vbios_version` and `pci/pci_bus_id` (DTD v10 without <pci_bus_id>: the `id`
attribute, the same address), and the document's `driver_version` (nvidia-smi(1), "-q -x";
the DTD nvsmi_device_v12.dtd names these elements).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from collectors.catalog import CATALOG, Scope
from collectors.frames import Rejection
from collectors.lineprotocol import FieldValue, Point
from collectors.nvidia_smi import states
from collectors.nvidia_smi.values import (
    Refuse,
    SmiParseError,
    first_readable,
    gpu_point,
    info_point,
    refuser,
)

_THROTTLE_OLD = ("clocks_event_reasons/clocks_event_reason_",
                 "clocks_throttle_reasons/clocks_throttle_reason_")

# Spellings of older DTDs, tried after Metric.smi_xml.
_FALLBACKS: Mapping[str, tuple[str, ...]] = {
    # v13 splits power into average and instant; v11 and older have power_readings.
    "power_draw": ("gpu_power_readings/instant_power_draw", "power_readings/power_draw"),
    # Pre-Ampere ECC reports per memory: device_memory is the DRAM (HBM/GDDR) count.
    "ecc_sbe_volatile": ("ecc_errors/volatile/single_bit/device_memory",),
    "ecc_dbe_volatile": ("ecc_errors/volatile/double_bit/device_memory",),
    "ecc_sbe_aggregate": ("ecc_errors/aggregate/single_bit/device_memory",),
    "ecc_dbe_aggregate": ("ecc_errors/aggregate/double_bit/device_memory",),
    # Before v12 page retirement on a pending blacklist was spelled pending_blacklist.
    "retired_pages_pending": ("retired_pages/pending_blacklist",),
}


def _paths() -> dict[str, tuple[str, ...]]:
    paths: dict[str, tuple[str, ...]] = {}
    for m in CATALOG.columns(Scope.GPU):
        if m.smi_xml is None:
            continue
        alts = list(_FALLBACKS.get(m.name, ()))
        if m.smi_xml.startswith(_THROTTLE_OLD[0]):
            # Drivers before 535 call clock events "throttle reasons".
            alts.append(m.smi_xml.replace(*_THROTTLE_OLD))
        paths[m.name] = (m.smi_xml, *alts)
    return paths


XML_PATHS: Mapping[str, tuple[str, ...]] = _paths()


def parse_xml(text: str | bytes, host: str, ts_ns: int,
              rejected: list[Rejection] | None = None) -> list[Point]:
    """One `gpu` point per <gpu> element, and a `gpu_info` point with its identity; readings
    out of range (and identity values that are not one) are refused into `rejected` (when
    given). A MIG-enabled GPU is one physical GPU here: its <mig_devices> are not descended
    into, so the readings are the physical GPU's; the point carries the instances as tags
    instead (`mig_tags`)."""
    data = text.encode() if isinstance(text, str) else text
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise SmiParseError(f"nvidia-smi XML does not parse: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise SmiParseError(f"not nvidia-smi XML: root element is <{root.tag}>")
    gpus = root.findall("gpu")
    if not gpus:
        raise SmiParseError("nvidia-smi XML holds no <gpu> element")
    driver = root.findtext("driver_version")
    points = []
    for index, gpu in enumerate(gpus):
        fields = gpu_fields(gpu, refuser(rejected, host, index))
        state = gpu_state(gpu)
        if state is not None:
            fields[states.FIELD] = state
        if fields:
            p = gpu_point(host, index, fields, ts_ns)
            p.tags.update(mig_tags(gpu))
            points.append(p)
        info = info_point(host, index, gpu_identity(gpu, driver), ts_ns, rejected)
        if info is not None:
            points.append(info)
    return points


def gpu_identity(gpu: ET.Element, driver: str | None) -> dict[str, str | None]:
    """The raw identity of one <gpu> (collectors.identity.FIELDS names)."""
    return {"uuid": gpu.findtext("uuid"), "serial": gpu.findtext("serial"),
            "pci_bus_id": gpu.findtext("pci/pci_bus_id") or gpu.get("id"),
            "model": gpu.findtext("product_name"), "vbios": gpu.findtext("vbios_version"),
            "driver": driver}


def gpu_state(gpu: ET.Element) -> int | None:
    """The GPU's `gpu_unreadable` state from what its elements print (see the module doc)."""
    core = [gpu.get("id"), *(gpu.findtext(path) for path in states.CORE_XML)]
    return states.assess([*((t, True) for t in core), *((e.text, False) for e in gpu.iter())])


def mig_tags(gpu: ET.Element) -> dict[str, str]:
    """`mig=enabled` and `mig_instances` (GPU instance ids, comma-separated, in document
    order) for a GPU in MIG mode, so an operator sees which tenants share a failing board;
    nothing for a GPU that is not (or cannot be) in MIG mode."""
    if (gpu.findtext("mig_mode/current_mig") or "").strip().lower() != "enabled":
        return {}
    ids = [t.strip() for t in (d.findtext("gpu_instance_id") for d in
                               gpu.findall("mig_devices/mig_device")) if t and t.strip()]
    tags = {"mig": "enabled"}
    if ids:
        tags["mig_instances"] = ",".join(ids)
    return tags


def gpu_fields(gpu: ET.Element, refuse: Refuse | None = None) -> dict[str, FieldValue]:
    # remapped_rows is the text "N/A" (no children) on GPUs without a row remapper, so its
    # child paths find nothing and the fields stay out.
    return first_readable(XML_PATHS, gpu.findtext, refuse)
