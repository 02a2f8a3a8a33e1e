"""NvmlCollector: GPU health straight from NVML (libnvidia-ml), no subprocess.

Each collect reads, for every GPU, the catalog's `gpu` metrics, the `nvlink` metrics per link
and the Xid events queued since the last collect, at one timestamp.

Failures are data: no library, no driver or a failed nvmlInit give up=False with the reason and
an empty Batch (nvmlInit is tried again next collect, so a driver loaded later is picked up). A
GPU in a bad state is its `gpu_unreadable` state (collectors/catalog.py) while the others keep
reporting: 3 when it answers NVML_ERROR_GPU_IS_LOST (fell off the bus; also named in the status
reason), 2 for NVML_ERROR_RESET_REQUIRED, 1 for NVML_ERROR_UNKNOWN from its handle or a core
reading (collectors.nvml.reader), 5 for an index a session had that a new session's device count
no longer reaches; every other GPU reads 0. When every GPU is lost the collector is down, and
still says so per GPU. What a GPU does not support is asked once and
listed in `unsupported`.

Each GPU's identity (UUID, serial, bus id, name, VBIOS, driver) goes with every collect as a
`gpu_info` point (collectors.identity), read once per handle (collectors.nvml.info); a GPU lost
this round keeps the identity last read, which is what its RMA needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from collectors import identity
from collectors.base import CollectorStatus
from collectors.frames import Batch
from collectors.lineprotocol import FieldValue, Point
from collectors.nvml.api import Handle, NvmlApi, load_pynvml
from collectors.nvml.gpu import read_gpu
from collectors.nvml.info import DEFAULT_REFRESH, IdentityCache, driver_version
from collectors.nvml.nvlink import read_links
from collectors.nvml.reader import UNKNOWN, GpuLost, GpuReader
from collectors.nvml.xid import XidWatcher
from collectors.schema import EVENT_FIELD, SchemaMapper

log = logging.getLogger(__name__)

UNREADABLE = "gpu_unreadable"
READABLE, LOST, NOT_FOUND = 0, 3, 5  # its values (collectors/catalog.py)


class NvmlCollector:
    def __init__(
        self,
        host: str,
        *,
        nvml: NvmlApi | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "nvml",
        xid_events: bool = True,
        loader: Callable[[], NvmlApi] = load_pynvml,
        identity_refresh: float = DEFAULT_REFRESH,
    ) -> None:
        """`nvml`: the binding to use; else `loader` imports pynvml on the first collect.
        `identity_refresh`: seconds between two reads of a GPU's identity on one handle."""
        self.name = name
        self.status = CollectorStatus()
        self.host = host
        self.xid_events = xid_events
        self._nvml = nvml
        self._loader = loader
        self._clock = clock
        self._mapper = SchemaMapper()  # one per collector: one EntityTable per topology
        self._ready = False
        self._handles: list[Handle | None] = []
        self._readers: list[GpuReader] = []
        self._xid: XidWatcher | None = None
        self._lost: frozenset[int] = frozenset()
        self._gone: list[int] = []  # indexes an earlier session had and this one does not
        self._ids = IdentityCache(identity_refresh)

    @property
    def unsupported(self) -> Mapping[int, frozenset[str]]:
        """Per GPU index, the catalog metrics (and "xid") its NVML does not support."""
        return {r.index: frozenset(r.unsupported) for r in self._readers if r.unsupported}

    @property
    def lost(self) -> frozenset[int]:
        """GPU indexes that answered GPU_IS_LOST (fell off the bus) on the last collect."""
        return self._lost

    def collect(self) -> Batch:
        ts_ns = int(self._clock() * 1e9)
        if not self._ready:
            reason = self._start()
            if reason:
                return self._down(reason)
        nvml = self._require()
        points: list[Point] = []
        lost: list[int] = []
        driver = driver_version(nvml)
        for r in self._readers:
            try:
                points += self._read(nvml, r, ts_ns)
            except GpuLost:
                lost.append(r.index)
                points.append(self._state(r.index, LOST, ts_ns))
            said: dict[str, FieldValue] = dict(self._ids.cached(r.index))
            if driver:
                said["driver"] = driver
            if said:
                points.append(Point(identity.MEASUREMENT, {"host": self.host,
                                                           "gpu": str(r.index)}, said, ts_ns))
        points += [self._state(i, NOT_FOUND, ts_ns) for i in self._gone]
        self._lost = frozenset(lost)
        batch = self._mapper.to_batch(points)
        if lost and len(lost) == len(self._readers):
            self._down(f"all GPUs are lost (fell off the bus): {_list(lost)}")
            return batch
        reason = f"GPU {_list(lost)} lost (fell off the bus)" if lost else ""
        if reason and reason != self.status.reason:
            log.warning("collector %s: %s", self.name, reason)
        self.status = CollectorStatus(up=True, reason=reason)
        return batch

    def close(self) -> None:
        """Free the event sets and end the NVML session; the next collect starts a new one."""
        if not self._ready:
            return
        nvml = self._require()
        if self._xid is not None:
            self._xid.close()
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)
        self._ready = False

    def _read(self, nvml: NvmlApi, r: GpuReader, ts_ns: int) -> list[Point]:
        h = self._handles[r.index]
        if h is None:  # lost when the session started: its handle may come back after a reset
            try:
                h = self._handles[r.index] = nvml.nvmlDeviceGetHandleByIndex(r.index)
            except nvml.NVMLError_GpuIsLost:
                raise GpuLost from None
            except nvml.NVMLError as exc:
                log.debug("gpu %d: no handle: %s", r.index, exc)
                state = UNKNOWN if isinstance(exc, nvml.NVMLError_Unknown) else None
                return [] if state is None else [self._state(r.index, state, ts_ns)]
        host, gpu = self.host, str(r.index)
        out: list[Point] = []
        r.state = READABLE
        fields: dict[str, FieldValue] = dict(read_gpu(r, h))
        if fields or r.state:
            fields[UNREADABLE] = r.state
            out.append(Point("gpu", {"host": host, "gpu": gpu}, fields, ts_ns))
        for link, link_fields in read_links(r, h).items():
            lf: dict[str, FieldValue] = dict(link_fields)
            out.append(Point("nvlink", {"host": host, "gpu": gpu, "link": str(link)}, lf, ts_ns))
        if self._xid is not None:
            self._xid.ensure(r, h)
            out += [Point("xid", {"host": host, "gpu": gpu}, {EVENT_FIELD: code}, ts_ns)
                    for code in self._xid.drain(r)]
        self._ids.read(nvml, r.index, h, ts_ns / 1e9)  # after the readings: never costs them
        return out

    def _start(self) -> str:
        """nvmlInit and one handle per GPU; the reason it failed, or "" when ready."""
        if self._nvml is None:
            try:
                self._nvml = self._loader()
            except ImportError:
                return "pynvml is not installed (pip install nvidia-ml-py)"
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound:
            return "NVML library not found (libnvidia-ml.so.1; is the NVIDIA driver installed?)"
        except nvml.NVMLError_DriverNotLoaded:
            return "NVIDIA driver not loaded"
        except nvml.NVMLError as exc:
            return f"nvmlInit failed: {exc}"
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            return f"nvmlDeviceGetCount failed: {exc}"
        self._handles = []
        for i in range(count):
            try:
                self._handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
            except nvml.NVMLError as exc:
                # A lost GPU has no handle; it is reported lost by the collect that follows.
                log.warning("gpu %d: nvmlDeviceGetHandleByIndex failed: %s", i, exc)
                self._handles.append(None)
        # Readers (and what they learned unsupported) survive a close/restart of the session.
        known = {r.index: r for r in self._readers}
        self._gone = sorted(i for i in known if i >= count)
        for i in self._gone:
            self._ids.forget(i)  # not that board any more, whatever comes back at the index
        self._readers = [known.get(i) or GpuReader(nvml, i) for i in range(count)]
        self._xid = XidWatcher(nvml) if self.xid_events else None
        self._ready = True
        return ""

    def _state(self, gpu: int, state: int, ts_ns: int) -> Point:
        return Point("gpu", {"host": self.host, "gpu": str(gpu)}, {UNREADABLE: state}, ts_ns)

    def _require(self) -> NvmlApi:
        if self._nvml is None:
            raise RuntimeError("NVML is not loaded")  # unreachable once _start succeeded
        return self._nvml

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        return Batch()


def _list(indexes: list[int]) -> str:
    return ", ".join(map(str, indexes))
