"""The slice of NVML the collector uses, as a Protocol.

The real implementation is the `pynvml` module (package nvidia-ml-py); tests pass a stand-in
with the same names. Spelling the surface out keeps the collector honest about what it calls:
a stand-in that implements this Protocol is enough to drive every code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Handle = Any  # an opaque nvmlDevice_t from nvmlDeviceGetHandleByIndex
EventSet = Any  # an opaque nvmlEventSet_t from nvmlEventSetCreate


class NvmlApi(Protocol):
    # Parameters are positional-only: the collector passes them so, and a stand-in may name
    # them as it likes.
    # Error classes: pynvml raises one NVMLError subclass per NVML_ERROR_* code.
    NVMLError: type[Exception]
    NVMLError_NotSupported: type[Exception]
    NVMLError_FunctionNotFound: type[Exception]
    NVMLError_GpuIsLost: type[Exception]
    NVMLError_LibraryNotFound: type[Exception]
    NVMLError_DriverNotLoaded: type[Exception]
    NVMLError_NotFound: type[Exception]
    NVMLError_InvalidArgument: type[Exception]
    NVMLError_Timeout: type[Exception]
    NVMLError_Unknown: type[Exception]
    NVMLError_ResetRequired: type[Exception]

    NVML_SUCCESS: int
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_ERROR_GPU_IS_LOST: int
    NVML_TEMPERATURE_GPU: int
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: int
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: int
    NVML_TEMPERATURE_THRESHOLD_MEM_MAX: int
    NVML_FI_DEV_MEMORY_TEMP: int
    NVML_VALUE_TYPE_DOUBLE: int
    NVML_VALUE_TYPE_UNSIGNED_INT: int
    NVML_VALUE_TYPE_UNSIGNED_LONG: int
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: int
    NVML_VALUE_TYPE_SIGNED_LONG_LONG: int
    NVML_VALUE_TYPE_SIGNED_INT: int
    NVML_VALUE_TYPE_UNSIGNED_SHORT: int
    NVML_CLOCK_SM: int
    NVML_MEMORY_ERROR_TYPE_CORRECTED: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    NVML_AGGREGATE_ECC: int
    NVML_MEMORY_LOCATION_SRAM: int
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: int
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: int
    NVML_FEATURE_ENABLED: int
    NVML_NVLINK_MAX_LINKS: int
    NVML_NVLINK_ERROR_DL_REPLAY: int
    NVML_NVLINK_ERROR_DL_RECOVERY: int
    NVML_NVLINK_ERROR_DL_CRC_FLIT: int
    NVML_NVLINK_ERROR_DL_CRC_DATA: int
    nvmlEventTypeXidCriticalError: int
    nvmlClocksEventReasonHwThermalSlowdown: int
    nvmlClocksEventReasonSwPowerCap: int
    nvmlClocksEventReasonHwSlowdown: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Handle: ...
    # Identity (collectors.nvml.info): str in nvidia-ml-py 11.515 and later, bytes before.
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Handle, /) -> str | bytes: ...
    def nvmlDeviceGetSerial(self, handle: Handle, /) -> str | bytes: ...
    def nvmlDeviceGetName(self, handle: Handle, /) -> str | bytes: ...
    def nvmlDeviceGetVbiosVersion(self, handle: Handle, /) -> str | bytes: ...
    def nvmlDeviceGetPciInfo(self, handle: Handle, /) -> Any: ...  # nvmlPciInfo_t, .busId
    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int, /) -> int: ...
    def nvmlDeviceGetTemperatureThreshold(self, handle: Handle, threshold: int, /) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: Handle, fieldIds: Sequence[int], /) -> Any: ...
    def nvmlDeviceGetMarginTemperature(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Handle, type: int, /) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Handle, /) -> Any: ...
    def nvmlDeviceGetTotalEccErrors(
        self, handle: Handle, errorType: int, counterType: int, /) -> int: ...
    def nvmlDeviceGetMemoryErrorCounter(
        self, handle: Handle, errorType: int, counterType: int, locationType: int, /
    ) -> int: ...
    def nvmlDeviceGetRetiredPages(self, device: Handle, sourceFilter: int, /) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Handle, /) -> int: ...
    def nvmlDeviceGetRemappedRows(self, device: Handle, /) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Handle, /) -> int: ...
    def nvmlDeviceGetNvLinkState(self, device: Handle, link: int, /) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(
        self, device: Handle, link: int, counter: int, /) -> int: ...
    def nvmlEventSetCreate(self) -> EventSet: ...
    def nvmlDeviceRegisterEvents(
        self, handle: Handle, eventTypes: int, eventSet: EventSet, /) -> None: ...
    def nvmlEventSetWait_v2(self, eventSet: EventSet, timeoutms: int, /) -> Any: ...
    def nvmlEventSetFree(self, eventSet: EventSet, /) -> None: ...


def load_pynvml() -> NvmlApi:
    """The real binding; ImportError when nvidia-ml-py is not installed."""
    import pynvml

    api: NvmlApi = pynvml
    return api
