"""The metric catalog: one record per metric, with how every source spells it.

Parsers, storage, detectors, dashboards and docs/metrics.md are all driven by this table, so a
metric is added here once and everything else follows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from collectors.compat import StrEnum, dataclass


class Kind(StrEnum):
    GAUGE = "gauge"  # a level sampled now (temperature, power)
    COUNTER = "counter"  # cumulative count; rates are derived with reset detection
    EVENT = "event"  # a discrete occurrence carrying a code (Xid)
    STATE = "state"  # an enumerated or boolean condition (link up, remap pending)


class FieldType(StrEnum):
    """How a metric's values are written as line protocol. One type per field, whoever writes
    it (an agent, the service's sink, an export), because InfluxDB refuses a point whose
    field type differs from what the shard already holds ("field type conflict")."""

    INTEGER = "integer"  # counters, states and event codes: `42i`
    FLOAT = "float"  # gauges and derived values: `41.5`


# Counters and event codes are written as InfluxDB integers (signed 64-bit): anything from 0 to
# the largest float below 2**63 fits; 2.0**63 itself would not.
COUNT_MAX = math.nextafter(2.0**63, 0.0)
COUNT_RANGE = (0.0, COUNT_MAX)

EVENT_FIELD = "code"  # the one field of an event measurement: `xid,host=n1,gpu=0 code=79i`


class Scope(StrEnum):
    GPU = "gpu"
    NVLINK = "nvlink"
    IB_PORT = "ib_port"
    NODE = "node"  # the host itself: node-wide sensors and host errors, and node alerts
    PSU = "psu"  # one power supply of a node's chassis (BMC)
    FAN = "fan"  # one chassis fan (BMC)


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: str
    kind: Kind
    scope: Scope
    description: str
    # Counters only: True when the driver, a GPU reset or a reboot zeroes it (volatile ECC,
    # NVLink and IB counters). Persistent counters (aggregate ECC, retired pages, remapped rows)
    # never decrease, so a decrease there is bad data, not a reset.
    resets: bool = False
    # Derived metrics are computed from others in the window store and never ingested.
    derived: bool = False
    dcgm: str | None = None  # DCGM field name and numeric id: "DCGM_FI_DEV_GPU_TEMP (150)"
    nvml: str | None = None  # NVML call (and enum) that reads it
    smi_xml: str | None = None  # path under <gpu> in `nvidia-smi -q -x`
    smi_query: str | None = None  # `nvidia-smi --query-gpu` field
    telegraf: str | None = None  # Telegraf measurement.field
    # sysfs path: an InfiniBand port's under /sys/class/infiniband/<dev>/ports/<n>/; a PCI
    # device's (GPU, HCA) under /sys/bus/pci/devices/<bdf>/; any other scope's from /sys
    # (absolute).
    sysfs: str | None = None
    redfish: str | None = None  # Redfish (DMTF DSP0266) resource and property that reads it
    ipmi: str | None = None  # IPMI sensor type / SEL record (ipmitool sdr / sel) that reads it
    # The values the metric can physically take, inclusive, in `unit`: ingest refuses any other
    # (a broken sensor or a hostile sender must not fire a hard rule). Gauges and states give
    # theirs; counters and event codes default to COUNT_RANGE.
    valid: tuple[float, float] | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        return COUNT_RANGE if self.valid is None else self.valid

    @property
    def bounds_text(self) -> str:
        """The valid range as a person reads it: `[-40, 200]`, `[0, 2^63)`."""
        lo, hi = self.bounds
        if hi == COUNT_MAX:
            return f"[{lo:g}, 2^63)"
        return f"[{lo:g}, {hi:g}]"

    def out_of_range(self, value: float) -> str | None:
        """Why `value` cannot be a reading of this metric, or None when it can."""
        lo, hi = self.bounds
        if lo <= value <= hi:  # NaN (missing) is not passed here: it is never out of range
            return None
        unit = "" if self.unit in ("bool", "enum") else f" {self.unit}"
        return f"{self.name} value {value:.15g} is outside its valid range {self.bounds_text}{unit}"

    @property
    def takes_bool(self) -> bool:
        """Whether a boolean is a reading of this metric (a flag: true 1, false 0). Anywhere
        else a boolean is a type error: `ecc_dbe_volatile=true` is not one error."""
        return self.kind is Kind.STATE and self.unit == "bool"

    @property
    def field_type(self) -> FieldType:
        return FieldType.FLOAT if self.kind is Kind.GAUGE else FieldType.INTEGER

    @property
    def dcgm_name(self) -> str | None:
        return None if self.dcgm is None else self.dcgm.split(" ")[0]


class Catalog:
    """An ordered registry of metrics that refuses duplicates."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}
        self._columns: dict[Scope, tuple[Metric, ...]] = {}
        self._types: dict[str, Mapping[str, FieldType]] = {}

    def register(self, metric: Metric) -> Metric:
        if metric.name in self._by_name:
            raise ValueError(f"metric {metric.name!r} is already registered")
        if metric.resets and metric.kind is not Kind.COUNTER:
            raise ValueError(f"metric {metric.name!r}: only counters can reset")
        if metric.valid is None and metric.kind in (Kind.GAUGE, Kind.STATE):
            raise ValueError(f"metric {metric.name!r}: a {metric.kind} needs a valid range")
        lo, hi = metric.bounds
        if not lo <= hi:
            raise ValueError(f"metric {metric.name!r}: valid range {metric.valid} is empty")
        self._by_name[metric.name] = metric
        self._columns.clear()
        self._types.clear()
        return metric

    def __getitem__(self, name: str) -> Metric:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown metric {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def columns(self, scope: Scope) -> tuple[Metric, ...]:
        """The ingested (non-derived) metrics of a scope, in the column order of a Frame."""
        cols = self._columns.get(scope)
        if cols is None:
            cols = tuple(
                m for m in self._by_name.values()
                if m.scope is scope and not m.derived and m.kind is not Kind.EVENT
            )
            self._columns[scope] = cols
        return cols

    def column(self, scope: Scope, name: str) -> int:
        for i, m in enumerate(self.columns(scope)):
            if m.name == name:
                return i
        raise KeyError(f"metric {name!r} is not an ingested {scope} metric")

    def line_types(self, measurement: str) -> Mapping[str, FieldType] | None:
        """The field types of one of our own measurements (a scope's, its metrics and derived
        metrics; an event's, its `code`); None for any other measurement."""
        if not self._types:
            types: dict[str, Mapping[str, FieldType]] = {}
            for scope in Scope:
                types[scope.value] = MappingProxyType({
                    m.name: m.field_type for m in self._by_name.values()
                    if m.scope is scope and m.kind is not Kind.EVENT})
            for m in self._by_name.values():
                if m.kind is Kind.EVENT:
                    types[m.name] = MappingProxyType({EVENT_FIELD: FieldType.INTEGER})
            self._types = types
        return self._types.get(measurement)

    def events(self, scope: Scope) -> tuple[Metric, ...]:
        return tuple(m for m in self._by_name.values() if m.scope is scope and m.kind is Kind.EVENT)


CATALOG = Catalog()
_r = CATALOG.register
_G, _C, _E, _S = Kind.GAUGE, Kind.COUNTER, Kind.EVENT, Kind.STATE
_XML_T = "temperature/"
# Valid ranges. A temperature sensor reads from -40 degC (the low end of datacentre parts'
# storage range) up to well under 200 degC (every GPU and HBM shuts down near 100 degC).
_TEMP = (-40.0, 200.0)
# The driver's thresholds are hot limits (87 to 105 degC in the captures): one below 40 degC
# would throttle or stop a GPU at idle, so it is no threshold any driver sets.
_LIMIT = (40.0, 200.0)
_FLAG = (0.0, 1.0)
_TEL = "nvidia_smi."
_IB = "infiniband."

# ---- GPU: thermal, power, clocks ----------------------------------------------------------
_r(Metric("gpu_temp", "degC", _G, Scope.GPU, "GPU core temperature",
          dcgm="DCGM_FI_DEV_GPU_TEMP (150)",
          nvml="nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
          smi_xml=_XML_T + "gpu_temp", smi_query="temperature.gpu",
          telegraf=_TEL + "temperature_gpu", valid=_TEMP))
_r(Metric("mem_temp", "degC", _G, Scope.GPU, "HBM (memory) temperature",
          dcgm="DCGM_FI_DEV_MEMORY_TEMP (140)",
          nvml="nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
          smi_xml=_XML_T + "memory_temp", smi_query="temperature.memory",
          telegraf=_TEL + "temperature_memory", valid=_TEMP))
_r(Metric("gpu_slowdown_temp", "degC", _G, Scope.GPU,
          "Driver's GPU slowdown threshold (per SKU); clocks are cut above it",
          dcgm="DCGM_FI_DEV_SLOWDOWN_TEMP (158)",
          nvml="nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)",
          smi_xml=_XML_T + "gpu_temp_slow_threshold",
          telegraf=_TEL + "temperature_slow_threshold", valid=_LIMIT))
_r(Metric("gpu_shutdown_temp", "degC", _G, Scope.GPU,
          "Driver's GPU shutdown threshold (per SKU)",
          dcgm="DCGM_FI_DEV_SHUTDOWN_TEMP (159)",
          nvml="nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)",
          smi_xml=_XML_T + "gpu_temp_max_threshold",
          telegraf=_TEL + "temperature_max_threshold", valid=_LIMIT))
_r(Metric("mem_max_temp", "degC", _G, Scope.GPU,
          "Driver's maximum operating HBM temperature (per SKU)",
          dcgm="DCGM_FI_DEV_MEM_MAX_OP_TEMP (151)",
          nvml="nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_MEM_MAX)",
          smi_xml=_XML_T + "gpu_temp_max_mem_threshold",
          telegraf=_TEL + "temperature_max_mem_threshold", valid=_LIMIT))
_r(Metric("gpu_temp_margin", "degC", _G, Scope.GPU,
          "T.Limit margin: degrees left before the GPU slows down (negative when over)",
          dcgm="DCGM_FI_DEV_GPU_TEMP_LIMIT (153)",
          nvml="nvmlDeviceGetMarginTemperature",
          smi_xml=_XML_T + "gpu_temp_tlimit", smi_query="temperature.gpu.tlimit",
          telegraf=_TEL + "temperature_gpu_tlimit",
          # The slowdown limit less the temperature: a difference of two values in _TEMP.
          valid=(_TEMP[0] - _TEMP[1], _TEMP[1] - _TEMP[0])))
_r(Metric("power_draw", "W", _G, Scope.GPU, "Board power draw",
          dcgm="DCGM_FI_DEV_POWER_USAGE (155)",
          nvml="nvmlDeviceGetPowerUsage (mW)",
          smi_xml="gpu_power_readings/power_draw", smi_query="power.draw",
          telegraf=_TEL + "power_draw",
          # The largest boards today draw about 1.2 kW; 5 kW leaves room for what comes next.
          valid=(0.0, 5000.0)))
_r(Metric("sm_clock", "MHz", _G, Scope.GPU, "Current SM clock",
          dcgm="DCGM_FI_DEV_SM_CLOCK (100)",
          nvml="nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
          smi_xml="clocks/sm_clock", smi_query="clocks.current.sm",
          telegraf=_TEL + "clocks_current_sm",
          valid=(0.0, 10_000.0)))  # boost clocks are about 2 GHz
_r(Metric("gpu_util", "percent", _G, Scope.GPU, "GPU utilization",
          dcgm="DCGM_FI_DEV_GPU_UTIL (203)",
          nvml="nvmlDeviceGetUtilizationRates().gpu",
          smi_xml="utilization/gpu_util", smi_query="utilization.gpu",
          telegraf=_TEL + "utilization_gpu", valid=(0.0, 100.0)))

# ---- GPU: memory errors ---------------------------------------------------------------------
_r(Metric("ecc_sbe_volatile", "errors", _C, Scope.GPU,
          "Correctable (single-bit) ECC errors since the last driver load", resets=True,
          dcgm="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL (310)",
          nvml="nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)",
          smi_xml="ecc_errors/volatile/dram_correctable",
          smi_query="ecc.errors.corrected.volatile.total",
          telegraf=_TEL + "ecc_errors_volatile_dram_correctable"))
_r(Metric("ecc_dbe_volatile", "errors", _C, Scope.GPU,
          "Uncorrectable (double-bit) ECC errors since the last driver load", resets=True,
          dcgm="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (311)",
          nvml="nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)",
          smi_xml="ecc_errors/volatile/dram_uncorrectable",
          smi_query="ecc.errors.uncorrected.volatile.total",
          telegraf=_TEL + "ecc_errors_volatile_dram_uncorrectable"))
_r(Metric("ecc_sbe_aggregate", "errors", _C, Scope.GPU,
          "Correctable ECC errors over the GPU's lifetime (persist across resets)",
          dcgm="DCGM_FI_DEV_ECC_SBE_AGG_TOTAL (312)",
          nvml="nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)",
          smi_xml="ecc_errors/aggregate/dram_correctable",
          smi_query="ecc.errors.corrected.aggregate.total",
          telegraf=_TEL + "ecc_errors_aggregate_dram_correctable"))
_r(Metric("ecc_dbe_aggregate", "errors", _C, Scope.GPU,
          "Uncorrectable ECC errors over the GPU's lifetime (persist across resets)",
          dcgm="DCGM_FI_DEV_ECC_DBE_AGG_TOTAL (313)",
          nvml="nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "
               "NVML_AGGREGATE_ECC)",
          smi_xml="ecc_errors/aggregate/dram_uncorrectable",
          smi_query="ecc.errors.uncorrected.aggregate.total",
          telegraf=_TEL + "ecc_errors_aggregate_dram_uncorrectable"))
_r(Metric("ecc_sram_correctable", "errors", _C, Scope.GPU,
          "Correctable SRAM ECC errors over the GPU's lifetime",
          nvml="nvmlDeviceGetMemoryErrorCounter(CORRECTED, AGGREGATE, NVML_MEMORY_LOCATION_SRAM)",
          smi_xml="ecc_errors/aggregate/sram_correctable",
          smi_query="ecc.errors.corrected.aggregate.sram",
          telegraf=_TEL + "ecc_errors_aggregate_sram_correctable"))
_r(Metric("retired_pages_sbe", "pages", _C, Scope.GPU,
          "Pages retired for multiple single-bit errors (pre-Ampere page retirement)",
          dcgm="DCGM_FI_DEV_RETIRED_SBE (390)",
          nvml="nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)",
          smi_xml="retired_pages/multiple_single_bit_retirement/retired_count",
          smi_query="retired_pages.single_bit_ecc.count",
          telegraf=_TEL + "retired_pages_multiple_single_bit"))
_r(Metric("retired_pages_dbe", "pages", _C, Scope.GPU,
          "Pages retired for double-bit errors",
          dcgm="DCGM_FI_DEV_RETIRED_DBE (391)",
          nvml="nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)",
          smi_xml="retired_pages/double_bit_retirement/retired_count",
          smi_query="retired_pages.double_bit.count",
          telegraf=_TEL + "retired_pages_double_bit"))
_r(Metric("retired_pages_pending", "bool", _S, Scope.GPU,
          "A page retirement waits for the next driver reload (1) or not (0)",
          dcgm="DCGM_FI_DEV_RETIRED_PENDING (392)",
          nvml="nvmlDeviceGetRetiredPagesPendingStatus",
          smi_xml="retired_pages/pending_retirement", smi_query="retired_pages.pending",
          telegraf=_TEL + "retired_pages_pending", valid=_FLAG))
_r(Metric("remapped_rows_correctable", "rows", _C, Scope.GPU,
          "HBM rows remapped because of correctable errors (Ampere and later)",
          dcgm="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS (394)",
          nvml="nvmlDeviceGetRemappedRows().corrRows",
          smi_xml="remapped_rows/remapped_row_corr",
          telegraf=_TEL + "remapped_rows_correctable"))
_r(Metric("remapped_rows_uncorrectable", "rows", _C, Scope.GPU,
          "HBM rows remapped because of uncorrectable errors",
          dcgm="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS (393)",
          nvml="nvmlDeviceGetRemappedRows().uncRows",
          smi_xml="remapped_rows/remapped_row_unc",
          telegraf=_TEL + "remapped_rows_uncorrectable"))
_r(Metric("remapped_rows_pending", "bool", _S, Scope.GPU,
          "A row remap waits for a GPU reset (1) or not (0)",
          dcgm="DCGM_FI_DEV_ROW_REMAP_PENDING (396)",
          nvml="nvmlDeviceGetRemappedRows().isPending",
          smi_xml="remapped_rows/remapped_row_pending",
          telegraf=_TEL + "remapped_rows_pending", valid=_FLAG))
_r(Metric("remapped_rows_failure", "bool", _S, Scope.GPU,
          "A row remap failed: spare rows exhausted, the GPU needs RMA (1) or not (0)",
          dcgm="DCGM_FI_DEV_ROW_REMAP_FAILURE (395)",
          nvml="nvmlDeviceGetRemappedRows().failureOccurred",
          smi_xml="remapped_rows/remapped_row_failure",
          telegraf=_TEL + "remapped_rows_failure", valid=_FLAG))

# ---- GPU: bus, throttling, Xid ----------------------------------------------------------------
# Telegraf's nvidia_smi input emits the clocks-event flags as 1/0 integer fields
# `clocks_event_reason_<reason>` for nvidia-smi schemas v11 to v13 (influxdata/telegraf pull
# request 19455: plugins/inputs/nvidia_smi/schema_v11, schema_v12 and schema_v13 parser.go, from
# `clocks_throttle_reasons` or `clocks_event_reasons` alike, through common/setters.go
# SetActiveIfUsed: "Active" 1, "Not Active" 0). Releases before it emit none. v13's
# `clocks_event_reasons_counters_*` are microseconds spent in a reason since the driver loaded,
# not whether it holds now: not these states (docs/telegraf.md).
_r(Metric("pcie_replay", "replays", _C, Scope.GPU,
          "PCIe link-level replays (retries); cleared on driver reload", resets=True,
          dcgm="DCGM_FI_DEV_PCIE_REPLAY_COUNTER (202)",
          nvml="nvmlDeviceGetPcieReplayCounter",
          smi_xml="pci/replay_counter"))
_r(Metric("throttle_thermal", "bool", _S, Scope.GPU,
          "HW thermal slowdown is active (clocks cut by half or more for temperature)",
          dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (112) & 0x40",
          nvml="nvmlDeviceGetCurrentClocksEventReasons & nvmlClocksEventReasonHwThermalSlowdown",
          smi_xml="clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown",
          smi_query="clocks_throttle_reasons.hw_thermal_slowdown",
          telegraf=_TEL + "clocks_event_reason_hw_thermal_slowdown", valid=_FLAG))
_r(Metric("throttle_power", "bool", _S, Scope.GPU,
          "SW power cap is holding clocks down",
          dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (112) & 0x4",
          nvml="nvmlDeviceGetCurrentClocksEventReasons & nvmlClocksEventReasonSwPowerCap",
          smi_xml="clocks_event_reasons/clocks_event_reason_sw_power_cap",
          smi_query="clocks_throttle_reasons.sw_power_cap",
          telegraf=_TEL + "clocks_event_reason_sw_power_cap", valid=_FLAG))
_r(Metric("throttle_hw_slowdown", "bool", _S, Scope.GPU,
          "HW slowdown is active (thermal, power brake or external signal)",
          dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (112) & 0x8",
          nvml="nvmlDeviceGetCurrentClocksEventReasons & nvmlClocksEventReasonHwSlowdown",
          smi_xml="clocks_event_reasons/clocks_event_reason_hw_slowdown",
          smi_query="clocks_throttle_reasons.hw_slowdown",
          telegraf=_TEL + "clocks_event_reason_hw_slowdown", valid=_FLAG))
_r(Metric("xid", "code", _E, Scope.GPU,
          "An Xid error reported by the driver; the value is the Xid code",
          dcgm="DCGM_FI_DEV_XID_ERRORS (230)",
          nvml="nvmlEventSetWait(nvmlEventTypeXidCriticalError).eventData",
          smi_xml=None, smi_query=None,
          telegraf=None))

# ---- GPU: readability and PCIe link ------------------------------------------------------------
# A GPU that nvidia-smi or NVML cannot read is a fault of its own (the public fault log of 400
# servers counts "unknown error", "GPU lost", "GPU not found" and nvidia-smi timeouts as GPU
# faults), so the collectors report it as a state instead of dropping the GPU's readings.
_r(Metric("gpu_unreadable", "enum", _S, Scope.GPU,
          "Whether the GPU can be read: 0 readable, 1 unknown error ([Unknown Error], ERR!, "
          "NVML_ERROR_UNKNOWN), 2 requires a reset ([GPU requires reset], "
          "NVML_ERROR_RESET_REQUIRED), 3 lost (NVML_ERROR_GPU_IS_LOST, [GPU is lost]), "
          "4 nvidia-smi hung past its timeout, 5 no longer listed (\"No devices were found\")",
          nvml="NVML_ERROR_UNKNOWN / _RESET_REQUIRED / _GPU_IS_LOST of the GPU's calls",
          valid=(0.0, 5.0)))
# nvidia-smi's --help-query-gpu: current width and generation "may be reduced when the GPU is not
# in use"; GPUs drop the generation at idle to save power, not the width (models/detectors/hard.py).
_PCI_XML = "pci/pci_gpu_link_info/"
_SYS_PCI = "/sys/bus/pci/devices/<bdf>/"  # sysfs spellings of the PCI device (collectors/pcie)
_LANES = (0.0, 32.0)  # x32 is the widest link the PCIe specification defines; 0 is no link
_GEN = (0.0, 8.0)  # PCIe 1.0 to 7.0 today; 0 when the speed reads "Unknown"
_r(Metric("pcie_link_width", "lanes", _G, Scope.GPU,
          "PCIe link width the GPU's link trained at now",
          dcgm="DCGM_FI_DEV_PCIE_LINK_WIDTH (238)", nvml="nvmlDeviceGetCurrPcieLinkWidth",
          smi_xml=_PCI_XML + "link_widths/current_link_width",
          smi_query="pcie.link.width.current", sysfs=_SYS_PCI + "current_link_width",
          valid=_LANES))
_r(Metric("pcie_link_width_max", "lanes", _G, Scope.GPU,
          "Widest PCIe link the GPU and its slot support",
          dcgm="DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH (236)", nvml="nvmlDeviceGetMaxPcieLinkWidth",
          smi_xml=_PCI_XML + "link_widths/max_link_width",
          smi_query="pcie.link.width.max", sysfs=_SYS_PCI + "max_link_width", valid=_LANES))
_r(Metric("pcie_link_gen", "generation", _G, Scope.GPU,
          "PCIe generation the GPU's link runs at now (lowered at idle to save power)",
          dcgm="DCGM_FI_DEV_PCIE_LINK_GEN (237)", nvml="nvmlDeviceGetCurrPcieLinkGeneration",
          smi_xml=_PCI_XML + "pcie_gen/current_link_gen",
          smi_query="pcie.link.gen.current",
          sysfs=_SYS_PCI + "current_link_speed (GT/s to generation)", valid=_GEN))
_r(Metric("pcie_link_gen_max", "generation", _G, Scope.GPU,
          "Highest PCIe generation the GPU and its slot support",
          dcgm="DCGM_FI_DEV_PCIE_MAX_LINK_GEN (235)", nvml="nvmlDeviceGetMaxPcieLinkGeneration",
          smi_xml=_PCI_XML + "pcie_gen/max_link_gen", smi_query="pcie.link.gen.max",
          sysfs=_SYS_PCI + "max_link_speed (GT/s to generation)", valid=_GEN))
_r(Metric("pcie_aer_correctable_total", "errors", _C, Scope.GPU,
          "PCIe AER correctable errors the GPU's PCI function reported since boot", resets=True,
          sysfs=_SYS_PCI + "aer_dev_correctable (TOTAL_ERR_COR)"))
_r(Metric("pcie_aer_nonfatal_total", "errors", _C, Scope.GPU,
          "PCIe AER uncorrectable non-fatal errors since boot", resets=True,
          sysfs=_SYS_PCI + "aer_dev_nonfatal (TOTAL_ERR_NONFATAL)"))
_r(Metric("pcie_aer_fatal_total", "errors", _C, Scope.GPU,
          "PCIe AER uncorrectable fatal errors since boot", resets=True,
          sysfs=_SYS_PCI + "aer_dev_fatal (TOTAL_ERR_FATAL)"))

# ---- NVLink, per link ------------------------------------------------------------------------
_NVL = "nvmlDeviceGetNvLinkErrorCounter(link, {})"
_r(Metric("nvlink_crc_flit", "errors", _C, Scope.NVLINK,
          "NVLink data-link flow-control CRC errors", resets=True,
          dcgm="DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L<n> (400-405; total 409)",
          nvml=_NVL.format("NVML_NVLINK_ERROR_DL_CRC_FLIT")))
_r(Metric("nvlink_crc_data", "errors", _C, Scope.NVLINK,
          "NVLink data-link data CRC errors", resets=True,
          dcgm="DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L<n> (410-415; total 419)",
          nvml=_NVL.format("NVML_NVLINK_ERROR_DL_CRC_DATA")))
_r(Metric("nvlink_replay", "errors", _C, Scope.NVLINK,
          "NVLink data-link replays (retransmissions)", resets=True,
          dcgm="DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L<n> (420-425; total 429)",
          nvml=_NVL.format("NVML_NVLINK_ERROR_DL_REPLAY")))
_r(Metric("nvlink_recovery", "errors", _C, Scope.NVLINK,
          "NVLink link recoveries (retraining)", resets=True,
          dcgm="DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L<n> (430-435; total 439)",
          nvml=_NVL.format("NVML_NVLINK_ERROR_DL_RECOVERY")))
_r(Metric("nvlink_state", "bool", _S, Scope.NVLINK,
          "NVLink link active (1) or inactive (0)",
          nvml="nvmlDeviceGetNvLinkState(link)", valid=_FLAG))

# ---- InfiniBand, per port ----------------------------------------------------------------------
def _ib(name: str, unit: str, description: str, sysfs: str, kind: Kind = _C,
        valid: tuple[float, float] | None = None) -> None:
    _r(Metric(f"ib_{name}", unit, kind, Scope.IB_PORT, description, resets=kind is _C,
              sysfs=sysfs, telegraf=_IB + name if kind is _C else None, valid=valid))


_ib("symbol_error", "errors", "Minor link errors on any lane (PHY symbol errors)",
    "counters/symbol_error")
_ib("link_error_recovery", "events", "Link retrained after errors", "counters/link_error_recovery")
_ib("link_downed", "events", "Link failed its error recovery and went down",
    "counters/link_downed")
_ib("port_rcv_errors", "packets", "Packets received with errors", "counters/port_rcv_errors")
_ib("local_link_integrity_errors", "events", "Local physical errors past their threshold",
    "counters/local_link_integrity_errors")
_ib("excessive_buffer_overrun_errors", "events", "Consecutive receive-buffer overruns",
    "counters/excessive_buffer_overrun_errors")
_ib("port_rcv_data", "words", "Data octets received, divided by 4 (IBA PortRcvData)",
    "counters/port_rcv_data")
_ib("port_xmit_data", "words", "Data octets sent, divided by 4 (IBA PortXmitData)",
    "counters/port_xmit_data")
# The kernel's enum ib_port_state also has 0 NOP and 5 ACTIVE_DEFER, which sysfs can show.
_ib("state", "enum", "Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE", "state", _S,
    (0.0, 5.0))
# A port Polling (2) or Disabled (3) with its logical state DOWN says whether the cable or the
# far end is the problem; what ibstat and sysfs show an operator first.
_ib("phys_state", "enum", "Physical port state: 1 Sleep, 2 Polling, 3 Disabled, "
    "4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest", "phys_state", _S,
    (0.0, 7.0))  # 0 is the IBA PortInfo's "no state change"
# From 2.5 (1X SDR) to 800 (4X XDR) today; 0 on a port with no link.
_ib("rate", "Gbit/s", "Link rate (e.g. 400 for 4X NDR)", "rate", _G, (0.0, 10_000.0))
# What kind of port it is, so ports of one node can be compared with their like
# (models/detectors/link_rate.py): Documentation/ABI/stable/sysfs-class-infiniband `link_layer`
# ("InfiniBand" or "Ethernet"; the core prints "Unknown" for anything else) and the driver's
# `hca_type`. mlx4/mlx5 print "MT" and the PCI device id in decimal (mlx5 hca_type_show:
# "MT%d", pdev->device): MT4129 ConnectX-7, MT4125 ConnectX-6 Dx, MT41692 BlueField-3; where
# hca_type has no such number the PCI device id is read from the HCA's function. ibstat prints
# the same words and type (`Link layer:`, `CA type:`).
_ib("link_layer", "enum", "Link layer: 1 InfiniBand, 2 Ethernet (RoCE), 0 Unknown (sysfs; "
    "ibstat `Link layer:`)", "link_layer", _S, (0.0, 2.0))
_ib("hca_model", "id", "The HCA's model: the number of its type (hca_type MT4129 -> 4129, the "
    "PCI device id in decimal; ibstat `CA type:`)", "../../hca_type", _S, (0.0, 65535.0))
# RoCE v2 GIDs a job can use (Ethernet ports only): the kernel adds a RoCE v1 and a RoCE v2 GID
# for each IP address of the port's netdev (and its upper devices) besides the link-local
# fe80:: pair that exists as soon as the netdev is up. NCCL picks a RoCE v2 GID that is neither
# zero nor link-local (net_ib: validGid, NCCL_IB_ROCE_VERSION_NUM=2); with none it falls back to
# index 0 and connections time out. Empty entries read all zeros in gids/<i> and EINVAL in
# gid_attrs/types/<i> (drivers/infiniband/core/sysfs.c).
_ib("gid_roce_v2", "gids", "RoCE v2 GIDs with a routable address (neither zero nor link-local) "
    "in the port's GID table; Ethernet ports only", "gids/<i> + gid_attrs/types/<i>", _G,
    (0.0, 4096.0))
_r(Metric("ib_link_flaps", "events", _C, Scope.IB_PORT,
          "Times the port left ACTIVE or link_downed rose, counted by the collector across reads "
          "(gpud's flap scan); starts at 0 when the collector starts", resets=True))
_r(Metric("ib_ber", "ratio", _G, Scope.IB_PORT,
          "Bit-error rate estimated from symbol errors over bits carried at the link rate",
          derived=True, valid=(0.0, 1.0)))
# The HCA's PCI function (/sys/class/infiniband/<dev>/device links to it), the same on each of
# its ports: a NIC trained below its width caps the port whatever its IB rate says.
_r(Metric("nic_pcie_link_width", "lanes", _G, Scope.IB_PORT,
          "PCIe link width the HCA's link trained at now",
          sysfs="../../device/current_link_width", valid=_LANES))
_r(Metric("nic_pcie_link_width_max", "lanes", _G, Scope.IB_PORT,
          "Widest PCIe link the HCA and its slot support",
          sysfs="../../device/max_link_width", valid=_LANES))



# ---- Node-wide: power supplies, fans, chassis sensors, host errors -----------------------------
# Read from the BMC out of band (Redfish, DMTF DSP0266 / schema bundle DSP8010; IPMI v2.0 sensor
# data records) or in band (EDAC sysfs, the kernel log). Ids are the Redfish MemberId or the IPMI
# entity instance, sanitised to the name grammar (collectors/frames.py). Enumerations follow the
# agreed wire schema of issue 31.
_PS = "PowerSubsystem/PowerSupplies/<id> (Power.PowerSupplies[] before 2020.4): "
_FANS = "ThermalSubsystem/Fans/<id> (Thermal.Fans[] before 2020.4): "
_HEALTH = (0.0, 2.0)
_r(Metric("psu_health", "enum", _S, Scope.PSU,
          "The power supply's health as its BMC rates it: 0 OK, 1 Warning (a predictive "
          "failure), 2 Critical (failed)",
          redfish=_PS + "Status.Health (OK, Warning, Critical)",
          ipmi="Power Supply sensor (type 0x08): ok 0, nc 1, cr/nr 2; 'Failure detected' 2, "
               "'Predictive failure' 1", valid=_HEALTH))
_r(Metric("psu_state", "enum", _S, Scope.PSU,
          "Whether the supply delivers power: 0 enabled (delivering), 1 standby by design "
          "(a spare, not a fault), 2 absent, 3 disabled or unavailable (not delivering, not "
          "by design)",
          redfish=_PS + "Status.State (Enabled 0; StandbySpare, StandbyOffline 1; Absent 2; "
                  "Disabled, UnavailableOffline and the rest 3)",
          ipmi="Power Supply sensor (type 0x08): 'Presence detected' 0, absent 2, "
               "'Power Supply AC lost' or 'Failure detected' 3", valid=(0.0, 3.0)))
_r(Metric("psu_input_v", "V", _G, Scope.PSU, "Input (line) voltage of the supply",
          redfish=_PS + "InputRanges / Metrics.InputVoltage (Power: LineInputVoltage)",
          ipmi="Voltage sensor (type 0x02) of the supply's entity", valid=(0.0, 500.0)))
_r(Metric("psu_output_w", "W", _G, Scope.PSU, "Power the supply delivers",
          redfish=_PS + "Metrics.OutputPowerWatts (Power: PowerOutputWatts, "
                  "LastPowerOutputWatts)",
          ipmi="Current/power sensor (type 0x03, watts) of the supply's entity",
          valid=(0.0, 10_000.0)))
_r(Metric("psu_temp_c", "degC", _G, Scope.PSU, "The supply's own temperature, where the BMC "
          "has a sensor for it",
          redfish="ThermalSubsystem/ThermalMetrics.TemperatureReadingsCelsius (Thermal."
                  "Temperatures[] with PhysicalContext PowerSupply): ReadingCelsius",
          ipmi="Temperature sensor (type 0x01) of the supply's entity", valid=_TEMP))
_r(Metric("fan_rpm", "rpm", _G, Scope.FAN, "Fan speed",
          redfish=_FANS + "SpeedPercent.SpeedRPM (Thermal: Reading with ReadingUnits RPM)",
          ipmi="Fan sensor (type 0x04), RPM", valid=(0.0, 100_000.0)))
_r(Metric("fan_pct", "percent", _G, Scope.FAN, "Fan speed as a share of its full speed",
          redfish=_FANS + "SpeedPercent.Reading (Thermal: Reading with ReadingUnits Percent)",
          ipmi="Fan sensor (type 0x04), percent", valid=(0.0, 100.0)))
_r(Metric("fan_health", "enum", _S, Scope.FAN,
          "The fan's health as its BMC rates it: 0 OK, 1 Warning, 2 Critical (failed)",
          redfish=_FANS + "Status.Health (OK, Warning, Critical)",
          ipmi="Fan sensor (type 0x04): ok 0, nc 1, cr/nr 2", valid=_HEALTH))
_r(Metric("fan_rpm_lower_critical", "rpm", _G, Scope.FAN,
          "The BMC's lower critical threshold for the fan's speed, where it has one: a fan "
          "below it is failing",
          redfish="Thermal.Fans[].LowerThresholdCritical (ThermalSubsystem: Sensor "
                  "Thresholds.LowerCritical.Reading)",
          ipmi="Fan sensor's lower critical threshold (ipmitool sensor: lcr)",
          valid=(0.0, 100_000.0)))
_r(Metric("inlet_temp_c", "degC", _G, Scope.NODE, "Air inlet temperature of the chassis",
          redfish="Chassis/<id>/ThermalSubsystem/ThermalMetrics (Thermal.Temperatures[] with "
                  "PhysicalContext Intake): ReadingCelsius",
          ipmi="Temperature sensor (type 0x01) named Inlet or Ambient (entity 0x37 air inlet, "
               "0x40)", valid=_TEMP))
_r(Metric("exhaust_temp_c", "degC", _G, Scope.NODE, "Air exhaust temperature of the chassis",
          redfish="Chassis/<id>/ThermalSubsystem/ThermalMetrics (Thermal.Temperatures[] with "
                  "PhysicalContext Exhaust): ReadingCelsius",
          ipmi="Temperature sensor (type 0x01) named Exhaust or Outlet", valid=_TEMP))
_r(Metric("psu_redundant", "bool", _S, Scope.NODE,
          "The node's power supplies are redundant (1) or redundancy is lost (0): one more "
          "supply failure takes the node down",
          redfish="PowerSubsystem.PowerSupplyRedundancy[].Status.Health (Power.Redundancy[]"
                  ".Status.Health): OK 1, else 0",
          ipmi="Power Supply redundancy sensor (type 0x08, sensor-specific offset): "
               "'Redundancy Lost' 0, 'Fully Redundant' 1", valid=_FLAG))
_r(Metric("fan_redundant", "bool", _S, Scope.NODE,
          "The node's fans are redundant (1) or redundancy is lost (0)",
          redfish="ThermalSubsystem.FanRedundancy[].Status.Health (Thermal.Redundancy[]"
                  ".Status.Health): OK 1, else 0",
          ipmi="Fan redundancy sensor (type 0x04): 'Redundancy Lost' 0, 'Fully Redundant' 1",
          valid=_FLAG))
_r(Metric("bmc_reachable", "bool", _S, Scope.NODE,
          "The poller reached the node's BMC this cycle (1) or it timed out or refused (0)",
          valid=_FLAG))
_r(Metric("edac_ce_total", "errors", _C, Scope.NODE,
          "Corrected host memory errors, all memory controllers (EDAC); zeroed by a reboot",
          resets=True, sysfs="/sys/devices/system/edac/mc/mc*/ce_count (summed)"))
_r(Metric("edac_ue_total", "errors", _C, Scope.NODE,
          "Uncorrected host memory errors, all memory controllers (EDAC); zeroed by a reboot",
          resets=True, sysfs="/sys/devices/system/edac/mc/mc*/ue_count (summed)"))
_r(Metric("mce_total", "events", _C, Scope.NODE,
          "CPU machine checks seen since the collector started (kernel log "
          "'mce: [Hardware Error]', rasdaemon's ras-mc-ctl --summary)", resets=True))
_r(Metric("sel", "code", _E, Scope.NODE,
          "A new BMC system event log entry; the value is its severity: 1 warning, 2 critical",
          redfish="Managers/<id>/LogServices/<id>/Entries/<id>: Severity (Warning 1, "
                  "Critical 2)",
          ipmi="ipmitool sel elist: a new record (its event's severity)"))
_r(Metric("diag", "code", _E, Scope.NODE,
          "An active diagnostic run on the node ended (gpuhealth's own runner, service/"
          "diagnostics); the value is what failed: 0 passed, 1 memory, 2 PCIe, 3 P2P bandwidth, "
          "4 stress, 5 data corruption, 6 software set-up, 7 other "
          "(collectors/diagnostics/classes.py)"))
_r(Metric("sxid", "code", _E, Scope.NODE,
          "An NVSwitch SXid error in the kernel log ('nvidia-nvswitchN: SXid (PCI:...): "
          "<code>, ...'); the value is the SXid number"))
