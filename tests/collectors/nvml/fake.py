"""A stand-in for pynvml, for the GPUs this machine does not have.

It implements the pynvml functions NvmlCollector calls and serves values from a real capture
(catalog field name -> value per GPU, as the nvidia-smi parsers read it). Constants, error
classes and ctypes structures are the real pynvml ones, so a misspelt name fails here as it
would on a GPU node. A metric the capture does not report (N/A) answers NOT_SUPPORTED, as the
driver that produced the capture did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

_THRESHOLDS = {
    pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "gpu_slowdown_temp",
    pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "gpu_shutdown_temp",
    pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "mem_max_temp",
}
_ECC = {
    (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): "ecc_sbe_volatile",
    (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): "ecc_dbe_volatile",
    (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): "ecc_sbe_aggregate",
    (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): "ecc_dbe_aggregate",
}
_RETIRED = {
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "retired_pages_sbe",
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "retired_pages_dbe",
}
_REMAPPED = ("remapped_rows_correctable", "remapped_rows_uncorrectable",
             "remapped_rows_pending", "remapped_rows_failure")
_BITS = (("throttle_thermal", pynvml.nvmlClocksEventReasonHwThermalSlowdown),
         ("throttle_power", pynvml.nvmlClocksEventReasonSwPowerCap),
         ("throttle_hw_slowdown", pynvml.nvmlClocksEventReasonHwSlowdown))


@dataclass(frozen=True)
class Handle:
    index: int


@dataclass
class EventSet:
    gpus: list[int] = field(default_factory=list)
    freed: bool = False


class FakeNvml:
    def __init__(self, gpus: Sequence[Mapping[str, float]], *, nvlinks: Mapping[int, int] = {},
                 legacy_driver: bool = False, identity: Sequence[Mapping[str, str]] = (),
                 driver: str | None = None, as_bytes: bool = False) -> None:
        self.gpus = [dict(g) for g in gpus]
        # Per GPU, its identity by collectors.identity.FIELDS name (an attribute not given
        # answers NOT_SUPPORTED, as a GeForce board's serial); the driver's version; and
        # whether strings come back as bytes, as nvidia-ml-py before 11.515 returns them.
        self.identity = [dict(i) for i in identity] + [{} for _ in gpus[len(identity):]]
        self.driver = driver
        self.as_bytes = as_bytes
        self.nvlinks = dict(nvlinks)  # GPU -> number of links; a GPU not listed has no NVLink
        self.link_counters: dict[tuple[int, int, int], int] = {}
        self.legacy_driver = legacy_driver  # no nvmlDeviceGetCurrentClocksEventReasons symbol
        self.xid_queue: dict[int, list[int]] = {}
        self.xid_unsupported: set[int] = set()
        self.lost: set[int] = set()
        self.failing: dict[str, Exception] = {}  # function name -> error raised on every call
        # GPU -> error every call on its handle raises (a GPU in a bad state: NVMLError_Unknown,
        # NVMLError_ResetRequired), and GPU -> error its nvmlDeviceGetHandleByIndex raises.
        self.gpu_errors: dict[int, Exception] = {}
        self.handle_errors: dict[int, Exception] = {}
        self.init_error: Exception | None = None
        self.calls: Counter[str] = Counter()
        self.calls_by_gpu: Counter[tuple[str, int]] = Counter()
        self.wait_timeouts: list[int] = []

    def __getattr__(self, name: str) -> Any:
        # Constants, error classes and structures from the real binding; never its functions,
        # which would need the real library.
        value = getattr(pynvml, name)
        if callable(value) and not isinstance(value, type):
            raise AttributeError(f"the stand-in does not implement {name}")
        return value

    # ---- plumbing --------------------------------------------------------------------------
    def _enter(self, fn: str, h: Handle | None = None) -> None:
        self.calls[fn] += 1
        if h is not None:
            self.calls_by_gpu[(fn, h.index)] += 1
            if h.index in self.lost:
                raise pynvml.NVMLError_GpuIsLost()
            if h.index in self.gpu_errors:
                raise self.gpu_errors[h.index]
        if fn in self.failing:
            raise self.failing[fn]

    def _value(self, h: Handle, metric: str) -> float:
        try:
            return self.gpus[h.index][metric]
        except KeyError:
            raise pynvml.NVMLError_NotSupported() from None

    # ---- session ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index in self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if index in self.handle_errors:
            raise self.handle_errors[index]
        return Handle(index)

    # ---- identity --------------------------------------------------------------------------
    def _said(self, h: Handle, name: str) -> str | bytes:
        try:
            v = self.identity[h.index][name]
        except KeyError:
            raise pynvml.NVMLError_NotSupported() from None
        return v.encode() if self.as_bytes else v

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        if self.driver is None:
            raise pynvml.NVMLError_NotSupported()
        return self.driver.encode() if self.as_bytes else self.driver

    def nvmlDeviceGetUUID(self, h: Handle) -> str | bytes:
        self._enter("nvmlDeviceGetUUID", h)
        return self._said(h, "uuid")

    def nvmlDeviceGetSerial(self, h: Handle) -> str | bytes:
        self._enter("nvmlDeviceGetSerial", h)
        return self._said(h, "serial")

    def nvmlDeviceGetName(self, h: Handle) -> str | bytes:
        self._enter("nvmlDeviceGetName", h)
        return self._said(h, "model")

    def nvmlDeviceGetVbiosVersion(self, h: Handle) -> str | bytes:
        self._enter("nvmlDeviceGetVbiosVersion", h)
        return self._said(h, "vbios")

    def nvmlDeviceGetPciInfo(self, h: Handle) -> Any:
        self._enter("nvmlDeviceGetPciInfo", h)
        bus = self.identity[h.index].get("pci_bus_id")
        if bus is None:
            raise pynvml.NVMLError_NotSupported()
        # The real structure: its busId is a char array, which ctypes gives as bytes.
        return pynvml.nvmlPciInfo_t(busId=bus.encode(), busIdLegacy=bus.encode()[-16:])

    # ---- GPU readings ----------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", h)
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return int(self._value(h, "gpu_temp"))

    def nvmlDeviceGetTemperatureThreshold(self, h: Handle, threshold: int) -> int:
        self._enter("nvmlDeviceGetTemperatureThreshold", h)
        return int(self._value(h, _THRESHOLDS[threshold]))

    def nvmlDeviceGetFieldValues(self, h: Handle, field_ids: Sequence[int]) -> Any:
        self._enter("nvmlDeviceGetFieldValues", h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for fv, fid in zip(values, field_ids, strict=True):
            assert fid == pynvml.NVML_FI_DEV_MEMORY_TEMP
            fv.fieldId = fid
            temp = self.gpus[h.index].get("mem_temp")
            if temp is None:  # a field carries its own return code; the call itself succeeds
                fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                fv.nvmlReturn = pynvml.NVML_SUCCESS
                fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                fv.value.uiVal = int(temp)
        return values

    def nvmlDeviceGetMarginTemperature(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetMarginTemperature", h)
        return int(self._value(h, "gpu_temp_margin"))

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        return round(self._value(h, "power_draw") * 1000)  # milliwatts

    def nvmlDeviceGetClockInfo(self, h: Handle, clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", h)
        assert clock == pynvml.NVML_CLOCK_SM
        return int(self._value(h, "sm_clock"))

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        return pynvml.c_nvmlUtilization_t(gpu=int(self._value(h, "gpu_util")), memory=0)

    def nvmlDeviceGetTotalEccErrors(self, h: Handle, error_type: int, counter: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", h)
        return int(self._value(h, _ECC[(error_type, counter)]))

    def nvmlDeviceGetMemoryErrorCounter(self, h: Handle, error_type: int, counter: int,
                                        location: int) -> int:
        self._enter("nvmlDeviceGetMemoryErrorCounter", h)
        assert (error_type, counter, location) == (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                   pynvml.NVML_AGGREGATE_ECC,
                                                   pynvml.NVML_MEMORY_LOCATION_SRAM)
        return int(self._value(h, "ecc_sram_correctable"))

    def nvmlDeviceGetRetiredPages(self, h: Handle, cause: int) -> list[int]:
        self._enter("nvmlDeviceGetRetiredPages", h)
        return [0x1000 * (i + 1) for i in range(int(self._value(h, _RETIRED[cause])))]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return int(self._value(h, "retired_pages_pending"))

    def nvmlDeviceGetRemappedRows(self, h: Handle) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", h)
        a, b, c, d = (int(self._value(h, m)) for m in _REMAPPED)
        return a, b, c, d

    def nvmlDeviceGetPcieReplayCounter(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetPcieReplayCounter", h)
        return int(self._value(h, "pcie_replay"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkWidth", h)
        return int(self._value(h, "pcie_link_width"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkWidth", h)
        return int(self._value(h, "pcie_link_width_max"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkGeneration", h)
        return int(self._value(h, "pcie_link_gen"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkGeneration", h)
        return int(self._value(h, "pcie_link_gen_max"))

    def _reasons(self, h: Handle) -> int:
        return sum(bit for name, bit in _BITS if self._value(h, name))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)
        if self.legacy_driver:
            raise pynvml.NVMLError_FunctionNotFound()
        return self._reasons(h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self._reasons(h)

    # ---- NVLink ----------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: Handle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", h)
        n = self.nvlinks.get(h.index)
        if n is None:
            raise pynvml.NVMLError_NotSupported()
        if link >= n:
            raise pynvml.NVMLError_NotFound()
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Handle, link: int, counter: int) -> int:
        self._enter("nvmlDeviceGetNvLinkErrorCounter", h)
        return self.link_counters.get((h.index, link, counter), 0)

    # ---- events ----------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> EventSet:
        self._enter("nvmlEventSetCreate")
        return EventSet()

    def nvmlDeviceRegisterEvents(self, h: Handle, event_types: int, s: EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", h)
        assert event_types == pynvml.nvmlEventTypeXidCriticalError
        if h.index in self.xid_unsupported:
            raise pynvml.NVMLError_NotSupported()
        s.gpus.append(h.index)

    def nvmlEventSetWait_v2(self, s: EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        self.wait_timeouts.append(timeout_ms)
        for gpu in s.gpus:
            queue = self.xid_queue.get(gpu)
            if queue:
                return pynvml.c_nvmlEventData_t(
                    eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=queue.pop(0))
        raise pynvml.NVMLError_Timeout()

    def nvmlEventSetFree(self, s: EventSet) -> None:
        self._enter("nvmlEventSetFree")
        s.freed = True
