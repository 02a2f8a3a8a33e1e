"""PcieCollector: each GPU's PCIe link and AER counters from sysfs, as `gpu` points; or, with
`source="lspci"` (hosts where sysfs is not readable, e.g. a container), the link from `lspci -D
-nn -vv` (collectors.pcie.lspci; no AER counters there). lspci runs through collectors/process.py
with a timeout; without root it cannot read the capability and each GPU is refused with that
reason.

The GPUs are the NVIDIA display-class functions under the root (vendor 0x10de, class 0x03xxxx:
VGA 0x0300 or 3D controller 0x0302). Each is put on the GPU index nvidia-smi gives its bus id
(`gpu_index`, refreshed by `refresh_index` when a bus id is missing from it, as the kernel-log
source does), else on its position in bus order with a note: NVML's documentation says its index
order is not guaranteed, so the map is what makes the entities the other sources' GPUs.

The root is injected (default /sys/bus/pci/devices) so tests read a tree of their own. Nothing
here raises: a root that cannot be listed is up=False with the reason, a device file that cannot
be read is a rejection naming it.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

from collectors.base import CollectorStatus
from collectors.frames import Batch, Entity, Rejection
from collectors.kernel_log.messages import normalize_bus_id
from collectors.lineprotocol import FieldValue, Point
from collectors.pcie.lspci import parse_lspci
from collectors.pcie.sysfs import PcieLink, read_link
from collectors.process import RunResult, run_process
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

PCI_ROOT = Path("/sys/bus/pci/devices")
NVIDIA = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA compatible, 3D controller (PCI code and ID spec)
SOURCES = ("sysfs", "lspci")
LSPCI_ARGV = ("lspci", "-D", "-nn", "-vv")
Runner = Callable[[Sequence[str], float, Optional[Mapping[str, str]]], RunResult]


def gpu_devices(root: Path) -> list[Path]:
    """The NVIDIA GPU functions under a PCI devices directory, in bus order."""
    found = []
    for dev in sorted(root.iterdir()):
        try:
            vendor = (dev / "vendor").read_text().strip().lower()
            cls = (dev / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA and cls.startswith(_GPU_CLASSES):
            found.append(dev)
    return found


class PcieCollector:
    def __init__(self, *, host: str | None = None, root: Path = PCI_ROOT,
                 gpu_index: Mapping[str, int] | None = None,
                 refresh_index: Callable[[], Mapping[str, int]] | None = None,
                 clock: Callable[[], float] = time.time, name: str = "pcie",
                 source: str = "sysfs", lspci: str = "lspci", timeout: float = 30.0,
                 runner: Runner = run_process) -> None:
        if source not in SOURCES:
            raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
        self.name = name
        self.source = source
        self.lspci_argv = [lspci, *LSPCI_ARGV[1:]]
        self.timeout = timeout
        self._runner = runner
        self.status = CollectorStatus()
        self.host = host or socket.gethostname()
        self.root = Path(root)
        self._index = _normalized(gpu_index or {})
        self._refresh = refresh_index
        self._clock = clock
        self._mapper = SchemaMapper()
        self._noted: set[str] = set()

    def collect(self) -> Batch:
        try:
            points, rejected = self.read(int(self._clock() * 1e9))
        except OSError as exc:
            what = " ".join(self.lspci_argv) if self.source == "lspci" else f"list {self.root}"
            return self._down(f"cannot {what}: {exc.strerror or exc}")
        batch = self._mapper.to_batch(points, rejected)
        self.status = CollectorStatus(up=True)
        return batch

    def read(self, ts_ns: int) -> tuple[list[Point], list[Rejection]]:
        """One `gpu` point per GPU with any reading, and the files refused; OSError when the
        root cannot be listed or lspci cannot run (or fails, or times out)."""
        links = self._lspci_links() if self.source == "lspci" else [
            (d.name, read_link(d)) for d in gpu_devices(self.root)]
        if self._refresh is not None and any(
                normalize_bus_id(bdf) not in self._index for bdf, _ in links):
            self._index.update(_normalized(self._refresh()))
        points: list[Point] = []
        rejected: list[Rejection] = []
        for position, (bdf, link) in enumerate(links):
            gpu = self._gpu_of(bdf, position)
            key = Entity.gpu(self.host, gpu).key
            rejected += [Rejection(f"{bdf}/{why}", entity=key) for why in link.refused]
            fields: dict[str, FieldValue] = dict(link.gpu_fields())
            if fields:
                points.append(Point("gpu", {"host": self.host, "gpu": str(gpu)}, fields, ts_ns))
        return points, rejected

    def _lspci_links(self) -> list[tuple[str, PcieLink]]:
        try:
            rc, out, err = self._runner(self.lspci_argv, self.timeout, None)
        except TimeoutError:
            raise OSError(f"timed out after {self.timeout:g} s; killed") from None
        if rc != 0:
            raise OSError(f"exited with status {rc}: {err.strip()[:200] or 'no output'}")
        links = []
        for dev in parse_lspci(out):
            if not dev.is_gpu:
                continue
            if dev.denied:
                dev.link.refused.append("Capabilities: <access denied> (lspci needs root to "
                                        "read the PCIe capability)")
            links.append((dev.bdf, dev.link))
        return links

    def _gpu_of(self, bdf: str, position: int) -> int:
        index = self._index.get(normalize_bus_id(bdf) or "")
        if index is not None:
            return index
        if bdf not in self._noted:
            self._noted.add(bdf)
            log.warning("pcie: GPU at %s is not in nvidia-smi's bus map; using its position "
                        "in bus order, %d", bdf, position)
        return position

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        return Batch()


def _normalized(mapping: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for bus, index in mapping.items():
        norm = normalize_bus_id(bus)
        if norm is not None:
            out[norm] = index
    return out
