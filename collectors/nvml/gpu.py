"""Per-GPU readings: one dict of catalog field names to values for the `gpu` measurement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from collectors.compat import zip_strict
from collectors.nvml.api import Handle, NvmlApi
from collectors.nvml.reader import GpuLost, GpuReader

THROTTLE = ("throttle_thermal", "throttle_power", "throttle_hw_slowdown")
REMAPPED = ("remapped_rows_correctable", "remapped_rows_uncorrectable",
            "remapped_rows_pending", "remapped_rows_failure")

_Put = Callable[[str, Optional[float]], None]


def read_gpu(r: GpuReader, h: Handle) -> dict[str, float]:
    """Everything the catalog asks of NVML for one GPU; a metric it cannot read is left out
    (missing, never zero). Raises GpuLost when the GPU has fallen off the bus."""
    n = r.nvml
    out: dict[str, float] = {}

    def put(name: str, v: float | None) -> None:
        if v is not None:
            out[name] = float(v)

    put("gpu_temp", r.call("gpu_temp", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU))
    put("mem_temp", _memory_temp(r, h))
    for name, threshold in (("gpu_slowdown_temp", n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                            ("gpu_shutdown_temp", n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
                            ("mem_max_temp", n.NVML_TEMPERATURE_THRESHOLD_MEM_MAX)):
        put(name, r.call(name, n.nvmlDeviceGetTemperatureThreshold, h, threshold))
    put("gpu_temp_margin", r.call("gpu_temp_margin", n.nvmlDeviceGetMarginTemperature, h))
    mw = r.call("power_draw", n.nvmlDeviceGetPowerUsage, h)
    put("power_draw", None if mw is None else mw / 1000.0)  # NVML reports milliwatts
    put("sm_clock", r.call("sm_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM))
    util = r.call("gpu_util", n.nvmlDeviceGetUtilizationRates, h)
    put("gpu_util", None if util is None else util.gpu)
    _ecc(r, h, put)
    _retired(r, h, put)
    rows = r.call(REMAPPED, n.nvmlDeviceGetRemappedRows, h)
    if rows is not None:  # (corrRows, uncRows, isPending, failureOccurred)
        corr_rows, unc_rows, pending, failure = rows
        put("remapped_rows_correctable", corr_rows)
        put("remapped_rows_uncorrectable", unc_rows)
        put("remapped_rows_pending", 1.0 if pending else 0.0)
        put("remapped_rows_failure", 1.0 if failure else 0.0)
    put("pcie_replay", r.call("pcie_replay", n.nvmlDeviceGetPcieReplayCounter, h))
    for name, fn in (("pcie_link_width", n.nvmlDeviceGetCurrPcieLinkWidth),
                     ("pcie_link_width_max", n.nvmlDeviceGetMaxPcieLinkWidth),
                     ("pcie_link_gen", n.nvmlDeviceGetCurrPcieLinkGeneration),
                     ("pcie_link_gen_max", n.nvmlDeviceGetMaxPcieLinkGeneration)):
        put(name, r.call(name, fn, h))
    reasons = r.call(THROTTLE, n.nvmlDeviceGetCurrentClocksEventReasons, h,
                     fallback=n.nvmlDeviceGetCurrentClocksThrottleReasons)
    if reasons is not None:
        # The event-reason and throttle-reason masks share bit values (renamed in driver 535).
        for name, bit in zip_strict(THROTTLE, (n.nvmlClocksEventReasonHwThermalSlowdown,
                                        n.nvmlClocksEventReasonSwPowerCap,
                                        n.nvmlClocksEventReasonHwSlowdown)):
            put(name, 1.0 if reasons & bit else 0.0)
    return out


def _ecc(r: GpuReader, h: Handle, put: _Put) -> None:
    n = r.nvml
    corr, unc = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    vol, agg = n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC
    for name, err, counter in (("ecc_sbe_volatile", corr, vol), ("ecc_dbe_volatile", unc, vol),
                               ("ecc_sbe_aggregate", corr, agg), ("ecc_dbe_aggregate", unc, agg)):
        # NOT_SUPPORTED also means ECC mode is off; turning it on needs a reset, which restarts
        # the agent's NVML session, so remembering it for the collector's life is safe.
        put(name, r.call(name, n.nvmlDeviceGetTotalEccErrors, h, err, counter))
    # Only GPUs that count errors by location (Ampere and later) answer for SRAM.
    put("ecc_sram_correctable", r.call("ecc_sram_correctable", n.nvmlDeviceGetMemoryErrorCounter,
                                       h, corr, agg, n.NVML_MEMORY_LOCATION_SRAM))


def _retired(r: GpuReader, h: Handle, put: _Put) -> None:
    n = r.nvml
    # Ampere and later remap rows instead and answer NOT_SUPPORTED here.
    for name, cause in (
            ("retired_pages_sbe", n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            ("retired_pages_dbe", n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
        pages = r.call(name, n.nvmlDeviceGetRetiredPages, h, cause)
        put(name, None if pages is None else len(pages))
    pending = r.call("retired_pages_pending", n.nvmlDeviceGetRetiredPagesPendingStatus, h)
    put("retired_pages_pending",
        None if pending is None else float(pending == n.NVML_FEATURE_ENABLED))


def _memory_temp(r: GpuReader, h: Handle) -> float | None:
    """HBM temperature has no dedicated call; it is field NVML_FI_DEV_MEMORY_TEMP, and a field
    carries its own return code, so NOT_SUPPORTED arrives in the value, not as an exception."""
    n = r.nvml
    values = r.call("mem_temp", n.nvmlDeviceGetFieldValues, h, [n.NVML_FI_DEV_MEMORY_TEMP])
    if values is None:
        return None
    fv = values[0]
    if fv.nvmlReturn == n.NVML_ERROR_GPU_IS_LOST:
        raise GpuLost
    if fv.nvmlReturn == n.NVML_ERROR_NOT_SUPPORTED:
        r.mark("mem_temp")
        return None
    if fv.nvmlReturn != n.NVML_SUCCESS:
        return None
    return field_value(n, fv)


def field_value(n: NvmlApi, fv: Any) -> float | None:
    """The number in an nvmlFieldValue_t, read through the union member its valueType names."""
    member = {
        n.NVML_VALUE_TYPE_DOUBLE: "dVal",
        n.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        n.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        n.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        n.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        n.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        n.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(int(fv.valueType))
    return None if member is None else float(getattr(fv.value, member))
