"""Xid errors through the NVML event API.

Each GPU gets its own event set registered for nvmlEventTypeXidCriticalError, so an event's
GPU is the set it came from (comparing device handles across ctypes objects is unreliable).
Every collect drains each set with a zero timeout: the driver queues events between ticks,
and waiting would stall the 5-s loop.
"""

from __future__ import annotations

import logging

from collectors.nvml.api import EventSet, Handle, NvmlApi
from collectors.nvml.reader import GpuLost, GpuReader

log = logging.getLogger(__name__)

# A storm of Xids (a GPU in a fault loop) must not hold one collect forever; the rest waits in
# the driver's queue for the next tick.
MAX_EVENTS_PER_COLLECT = 1000


class XidWatcher:
    def __init__(self, nvml: NvmlApi) -> None:
        self._nvml = nvml
        self._sets: dict[int, EventSet] = {}

    def ensure(self, r: GpuReader, h: Handle) -> None:
        """Register the GPU's event set once; a GPU that cannot deliver Xids is recorded."""
        if r.index in self._sets or "xid" in r.unsupported:
            return
        n = self._nvml
        event_set = r.call("xid", n.nvmlEventSetCreate)
        if event_set is None:
            return
        try:
            n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, event_set)
        except n.NVMLError as exc:
            self._free(event_set)
            if isinstance(exc, n.NVMLError_GpuIsLost):
                raise GpuLost from None
            if isinstance(exc, (n.NVMLError_NotSupported, n.NVMLError_FunctionNotFound)):
                r.mark("xid")
            else:  # transient: try to register again next tick
                log.debug("gpu %d: nvmlDeviceRegisterEvents failed: %s", r.index, exc)
            return
        self._sets[r.index] = event_set

    def drain(self, r: GpuReader) -> list[int]:
        """The Xid codes queued for this GPU since the last drain, oldest first."""
        event_set = self._sets.get(r.index)
        if event_set is None:
            return []
        n = self._nvml
        codes: list[int] = []
        for _ in range(MAX_EVENTS_PER_COLLECT):
            try:
                data = n.nvmlEventSetWait_v2(event_set, 0)
            except n.NVMLError_Timeout:
                break  # the queue is empty
            except n.NVMLError_GpuIsLost:
                raise GpuLost from None
            except n.NVMLError as exc:
                log.debug("gpu %d: nvmlEventSetWait_v2 failed: %s", r.index, exc)
                break
            if data.eventType & n.nvmlEventTypeXidCriticalError:
                codes.append(int(data.eventData))
        return codes

    def close(self) -> None:
        for event_set in self._sets.values():
            self._free(event_set)
        self._sets.clear()

    def _free(self, event_set: EventSet) -> None:
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree failed: %s", exc)
