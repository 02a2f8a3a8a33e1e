"""A GPU's identity: UUID, board serial, PCI bus id, model, VBIOS and driver version.

Identity is a slowly-changing attribute of a GPU, not a reading: sources carry it beside their
samples (Batch.identity, keyed by the GPU's entity key) and the service stores it once per
change. Every source spells it its own way; this module is the one place that says what a
valid value is, so an RMA ticket, a Prometheus label and an InfluxDB field all read the same:

- NVML (nvmlDeviceGetUUID/GetSerial/GetPciInfo/GetName/GetVbiosVersion, the system's driver),
- nvidia-smi `-q -x` (`uuid`, `serial`, `pci/pci_bus_id`, `product_name`, `vbios_version`,
  the document's `driver_version`), `-q` text and `--query-gpu` CSV,
- dcgm-exporter's labels (`UUID`, `pci_bus_id`, `modelName`, `DCGM_FI_DRIVER_VERSION`, and
  `DCGM_FI_DEV_SERIAL` / `DCGM_FI_DEV_VBIOS_VERSION` where its CSV enables them as labels),
- Telegraf's `nvidia_smi` (tags `uuid`, `name`; fields `driver_version`, `serial`,
  `vbios_version`),
- our own line protocol: measurement `gpu_info`, tags `host`, `gpu`, one string field each.

Values come from the wire: each is bounded, of a conservative alphabet, and a tool's "no value"
spelling (`N/A`, `[Not Supported]`, `[Unknown Error]`) is no value. A value refused is named
with why, and the others of its GPU are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace

from collectors.compat import dataclass

MEASUREMENT = "gpu_info"
FIELDS = ("uuid", "serial", "pci_bus_id", "model", "vbios", "driver")
MAX_VALUE = 128
# Model names ("NVIDIA A100-SXM4-80GB", "Tesla T4"), versions ("96.00.74.00.01"), bus ids and
# serials: letters, digits, space and a little punctuation. Nothing a label, a line-protocol
# string or a shell could read as syntax (quotes, backslashes, '=', ',', newlines).
_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:()/+#@-]*")
# What the tools print for a value they do not have.
_NONE = frozenset({"", "n/a", "[n/a]", "na", "none", "[not supported]", "not supported",
                   "[unknown error]", "unknown error", "unknown", "[unknown]",
                   "[insufficient permissions]", "[gpu is lost]", "[gpu requires reset]",
                   "0"})
_BUS = re.compile(r"^(?:PCI:)?(?:(?P<dom>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):"
                  r"(?P<dev>[0-9A-Fa-f]{2})(?:\.(?P<fn>[0-7]))?$")


# dcgm-exporter's labels (and Telegraf's tags when it scrapes dcgm-exporter) -> FIELDS.
DCGM_LABELS = {"UUID": "uuid", "pci_bus_id": "pci_bus_id", "modelName": "model",
               "DCGM_FI_DRIVER_VERSION": "driver", "DCGM_FI_DEV_SERIAL": "serial",
               "DCGM_FI_DEV_VBIOS_VERSION": "vbios"}


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What a source said of one GPU; "" = not said. `at` is when (epoch seconds of the
    sender's round: compared only with the same GPU's other identities, never across nodes)."""

    uuid: str = ""
    serial: str = ""
    pci_bus_id: str = ""
    model: str = ""
    vbios: str = ""
    driver: str = ""
    at: float = field(default=0.0, compare=False)

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in FIELDS)

    def as_dict(self) -> dict[str, str]:
        """The attributes said, by FIELDS name."""
        return {f: v for f in FIELDS if (v := getattr(self, f))}

    def merged(self, newer: GpuIdentity) -> GpuIdentity:
        """This identity with what `newer` says on top: a field `newer` leaves empty keeps
        ours (NVLink's source may not name the model, dcgm-exporter no serial)."""
        said = newer.as_dict()
        return replace(self, **said, at=max(self.at, newer.at)) if said else self

    def board_change(self, newer: GpuIdentity) -> str | None:
        """Why `newer` is another board than this one (a UUID or serial that both name and
        that differ), or None: the same board, or not enough said to tell."""
        for name in ("serial", "uuid"):
            old, new = getattr(self, name), getattr(newer, name)
            if old and new and old != new:
                return f"{name} {old} -> {new}"
        return None


def clean(raw: Mapping[str, object], at: float = 0.0) -> tuple[GpuIdentity, list[str]]:
    """An identity from raw values by FIELDS name (others ignored), and why each refused
    value was refused. A "no value" spelling is silently no value."""
    said: dict[str, str] = {}
    problems: list[str] = []
    for name in FIELDS:
        v = raw.get(name)
        if v is None:
            continue
        got = value(name, v)
        if isinstance(got, tuple):
            problems.append(got[0])
        elif got:
            said[name] = got
    return GpuIdentity(**said, at=at), problems


def value(name: str, v: object) -> str | tuple[str]:
    """One attribute normalised ("" = no value), or (why it is refused,)."""
    if not isinstance(v, str):
        return (f"{name}: {v!r} is not text",)
    text = " ".join(v.split())
    if text.lower() in _NONE or (name == "serial" and not text.strip("0")):
        return ""  # an all-zero serial (cloud A10G and T4 boards, masked captures) is none
    if len(text) > MAX_VALUE:
        return (f"{name}: longer than {MAX_VALUE} characters",)
    if _VALUE.fullmatch(text) is None:
        return (f"{name}: {text[:60]!r} holds characters other than letters, digits, space "
                f"and ._:()/+#@-",)
    if name == "pci_bus_id":
        bus = bus_id(text)
        return bus if bus is not None else (f"pci_bus_id: {text[:60]!r} is not a PCI address",)
    return text


def bus_id(text: str) -> str | None:
    """A PCI address as nvidia-smi and dcgm-exporter print it ('00000000:18:00.0': 8-digit
    domain, upper-case hex, the function), from any of their spellings or the kernel's."""
    m = _BUS.match(text.strip())
    if m is None:
        return None
    return (f"{int(m['dom'] or '0', 16):08X}:{m['bus'].upper()}:{m['dev'].upper()}."
            f"{m['fn'] or '0'}")


def dcgm_fields(labels: Mapping[str, str]) -> dict[str, str]:
    """The identity a dcgm-exporter sample's labels carry, as `gpu_info` fields (raw)."""
    return {ours: labels[label] for label, ours in DCGM_LABELS.items() if labels.get(label)}


def merge_into(into: dict[str, GpuIdentity], more: Mapping[str, GpuIdentity]) -> None:
    """Join one batch's identities into another's, field by field, newer on top."""
    for key, ident in more.items():
        had = into.get(key)
        if had is None:
            into[key] = ident
        elif had.at <= ident.at:
            into[key] = had.merged(ident)
        else:
            into[key] = ident.merged(had)


def from_fields(fields_: Mapping[str, object], at: float) -> tuple[GpuIdentity, list[str],
                                                                   list[str]]:
    """A `gpu_info` point's fields back: the identity, the refused values' reasons, and the
    field names that are not identity attributes."""
    ident, problems = clean(fields_, at)
    unknown = [k for k in fields_ if k not in FIELDS]
    return ident, problems, unknown
