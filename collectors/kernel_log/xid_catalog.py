"""NVIDIA's Xid catalog as data: meaning, NVIDIA resolution buckets, GPUd's action, our severity.

Sources: mnemonic, description and the
Immediate / Investigatory resolution buckets come from NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, as GPUd's catalog_generated.go
mirrors it); `gpud_action`, `fatal` and `escalates` are GPUd's classification
(github.com/leptonai/gpud, components/accelerator/nvidia/xid/xid.go).
`severity` is ours and must agree with models/detectors/xid.py (a test checks it):

- critical: the repair is a reboot that escalates to hardware inspection, or inspection outright;
- reset-class: the GPU (or node) needs a reset but is not known bad;
- application: the job or its CUDA code is the usual cause (13, 31, 43 ...);
- informational: nothing to do on its own, or another signal owns it (63 -> remapped rows).
"""

from __future__ import annotations

from collectors.compat import StrEnum, dataclass


class Severity(StrEnum):
    CRITICAL = "critical"
    RESET = "reset-class"
    APPLICATION = "application"
    INFORMATIONAL = "informational"


class GpudAction(StrEnum):
    NONE = ""  # GPUd: Warning with no suggested action
    REBOOT_SYSTEM = "REBOOT_SYSTEM"
    HARDWARE_INSPECTION = "HARDWARE_INSPECTION"
    CHECK_USER_APP_AND_GPU = "CHECK_USER_APP_AND_GPU"
    IGNORE_NO_ACTION_REQUIRED = "IGNORE_NO_ACTION_REQUIRED"


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    severity: Severity
    immediate: str  # NVIDIA's immediate resolution bucket (RESTART_APP, RESET_GPU, ...)
    investigatory: str  # NVIDIA's investigatory bucket ("" where the catalog has none)
    gpud_action: GpudAction
    fatal: bool  # GPUd event type Fatal (Unhealthy) rather than Warning (Degraded)
    escalates: bool = False  # GPUd: REBOOT_SYSTEM turns into HARDWARE_INSPECTION after 2 reboots
    deferred_to: str = ""  # another signal is authoritative for this condition


_C, _R, _A, _I = Severity.CRITICAL, Severity.RESET, Severity.APPLICATION, Severity.INFORMATIONAL
_RB, _HW = GpudAction.REBOOT_SYSTEM, GpudAction.HARDWARE_INSPECTION
_APP, _IGN = GpudAction.CHECK_USER_APP_AND_GPU, GpudAction.IGNORE_NO_ACTION_REQUIRED
_NO = GpudAction.NONE
_CS = "CONTACT_SUPPORT"


def _x(code: int, mnemonic: str, description: str, severity: Severity, immediate: str,
       investigatory: str, action: GpudAction, fatal: bool, escalates: bool = False,
       deferred_to: str = "") -> XidInfo:
    return XidInfo(code, mnemonic, description, severity, immediate, investigatory, action,
                   fatal, escalates, deferred_to)


# Codes NVIDIA marks "Unused" on current GPUs are kept when GPUd still classifies them, because
# older drivers (and older fleets) do emit them.
_ENTRIES: tuple[XidInfo, ...] = (
    _x(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", _A,
       "RESTART_APP", _CS, _NO, False),
    _x(9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Driver error programming GPU (unused)", _R,
       _CS, "", _RB, True),
    _x(12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Driver error handling GPU exception (unused)",
       _R, _CS, "", _RB, True),
    _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", _A,
       "RESTART_APP", "WORKFLOW_XID_13", _APP, False),
    _x(16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Display engine hung (unused)", _R,
       _CS, _CS, _RB, True),
    _x(18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Bus mastering disabled (unused)", _R,
       _CS, "", _RB, True),
    _x(19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Display engine error (unused)", _R,
       _CS, "", _RB, True),
    _x(26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Framebuffer timeout (unused)", _R,
       _CS, "", _RB, True),
    _x(27, "ROBUST_CHANNEL_VP_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(28, "ROBUST_CHANNEL_VP2_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(29, "ROBUST_CHANNEL_BSP_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "GPU semaphore access error (unused)", _R,
       _CS, "", _RB, True),
    _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", _A,
       "RESTART_APP", "WORKFLOW_XID_31", _APP, False),
    _x(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", _C,
       "RESTART_APP", "CHECK_APP/CUDA", _RB, True, escalates=True),
    _x(33, "ROBUST_CHANNEL_SEC_ERROR", "Internal micro-controller error (unused)", _R,
       _CS, "", _RB, True),
    _x(34, "ROBUST_CHANNEL_MSVLD_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(36, "ROBUST_CHANNEL_MSPPP_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", _C,
       "IGNORE", _CS, _RB, True, escalates=True),
    _x(42, "ROBUST_CHANNEL_VIC_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", _A,
       "IGNORE", _CS, _APP, False),
    _x(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
       "Graphics Engine fault during context switch", _C, "IGNORE", _CS, _RB, True,
       escalates=True),
    _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
       _I, "WORKFLOW_XID_45", "RESTART_FM if solo, else follow the other Xid", _IGN, False),
    _x(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", _R,
       "RESET_GPU", _CS, _RB, True),
    _x(47, "ROBUST_CHANNEL_NVENC0_ERROR", "Video processor exception (unused)", _R,
       _CS, "", _RB, True),
    _x(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", _C,
       "WORKFLOW_XID_48", "WORKFLOW_XID_48", _RB, True, escalates=True),
    _x(59, "PMU_ERROR", "Internal micro-controller error (unused)", _R, _CS, "", _RB, True),
    _x(60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", _R,
       "RESTART_APP", "INVESTIGATE_SW", _RB, True),
    _x(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", _R,
       _CS, "", _RB, True),
    _x(62, "PMU_HALT_ERROR", "Internal micro-controller halt", _C,
       "RESET_GPU", _CS, _RB, True, escalates=True),
    # GPUd classifies 63 Fatal with escalation, but discards it where the GPU supports row
    # remapping because a pending remap clears after a reset; NVIDIA says IGNORE. The remap
    # rules read the authoritative NVML state, so the Xid alone is only informational.
    _x(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", _I,
       "IGNORE", "IGNORE", _RB, True, escalates=True, deferred_to="remapped_rows"),
    _x(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", _C,
       "RESET_GPU", _CS, _RB, True, escalates=True),
    _x(65, "ROBUST_CHANNEL_NVENC1_ERROR", "Video processor exception (unused)", _C,
       _CS, "", _RB, True, escalates=True),
    _x(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", _C,
       "RESTART_APP", _CS, _RB, True, escalates=True),
    _x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", _C,
       "RESTART_APP", "CHECK_APP/CUDA", _RB, True, escalates=True),
    _x(74, "NVLINK_ERROR", "NVLINK Error", _C,
       "WORKFLOW_NVLINK_ERR", _CS, _RB, True, escalates=True),
    _x(78, "VGPU_START_ERROR", "vGPU Start Error", _R, "UPDATE_SWFW", "UPDATE_SWFW", _RB, True),
    _x(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", _C,
       "RESTART_BM", _CS, _RB, True, escalates=True),
    _x(81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "VGA subsystem error (unused)", _C,
       _CS, "", _HW, True),
    _x(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", _I,
       "IGNORE", _CS, _IGN, False),
    # GPUd raises 94 to Fatal but with a reboot threshold of 1000 (contained, application-level);
    # NVIDIA says RESTART_APP. The detector scores it critical: see the report on this catalog.
    _x(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", _C,
       "RESTART_APP", "IGNORE (sympathetic)", _RB, True),
    _x(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", _C,
       "RESET_GPU", "IGNORE (sympathetic)", _RB, True, escalates=True),
    _x(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", _R,
       "RESET_GPU", _CS, _NO, False),
    _x(110, "SEC_FAULT_ERROR", "Security Fault Error", _C,
       "RESET_GPU", "INVESTIGATE_SW", _RB, True, escalates=True),
    _x(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", _C,
       "RESET_GPU", "INVESTIGATE_SW", _RB, True, escalates=True),
    _x(120, "GSP_ERROR", "GSP Error", _C, "RESET_GPU", "INVESTIGATE_SW", _RB, True,
       escalates=True),
    _x(121, "C2C_ERROR", "C2C Error", _C, "IGNORE", _CS, _RB, True, escalates=True),
    _x(123, "SPI_PMU_RPC_WRITE_FAIL", "SPI PMU RPC write failure (unused)", _C,
       _CS, "", _RB, True, escalates=True),
    _x(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", _A,
       "IGNORE", "XID_137_FLOW", _APP, False),
    _x(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", _C,
       "RESET_GPU", _CS, _RB, True, escalates=True),
    _x(143, "GPU_INIT_ERROR", "GPU Initialization Error", _C, "RESET_GPU", _CS, _HW, True),
    # NVLink5 (Blackwell): the catalog routes all seven through a decode of intrinfo and the
    # error-status word; GPUd reports them as Warning + REBOOT_SYSTEM until decoded.
    _x(144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", _R,
       "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _RB, False),
    _x(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", _I,
       "XID_154", "informational, about another Xid", _NO, False),
    _x(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", _R,
       "RESET_GPU", "INVESTIGATE_SW_USER", _RB, False),
    _x(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", _R,
       "RESET_GPU", "IGNORE", _RB, False),
    _x(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", _R, "RESET_GPU", _CS, _RB, False),
    _x(170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", _A, "", "", _APP, False),
)


def _index(entries: tuple[XidInfo, ...]) -> dict[int, XidInfo]:
    table: dict[int, XidInfo] = {}
    for e in entries:
        if e.code in table:
            raise ValueError(f"Xid {e.code} is listed twice")
        table[e.code] = e
    return table


XID_CATALOG: dict[int, XidInfo] = _index(_ENTRIES)


def xid_info(code: int) -> XidInfo | None:
    """The catalog entry of a code, or None for codes the catalog does not list."""
    return XID_CATALOG.get(code)


def codes_with(severity: Severity) -> frozenset[int]:
    return frozenset(c for c, e in XID_CATALOG.items() if e.severity is severity)
