"""NVIDIA's NVSwitch SXid list as data: which SXids are fatal, for rules reading `sxid` events.

Source: NVIDIA Fabric Manager User Guide (DU-09883-001 v1.3, October 2023), appendix "NVSwitch
SXid Errors": D.4 non-fatal, D.5 fatal (fatal to the port: the traffic through it stalls, the
GPUs behind it see Xid 45 / 74), D.6 always fatal (fatal to the whole fabric: reset every GPU
and NVSwitch, i.e. restart the host), D.7 other notable SXids; as GPUd mirrors it
(github.com/leptonai/gpud, components/accelerator/nvidia/sxid/sxid.go). 20009 is not in the
guide; NVIDIA's open kernel modules name it NVSWITCH_ERR_HW_DLPL_RX_SHORT_ERROR_RATE (non-fatal).

The kernel line itself says "Fatal" or "Non-fatal" for that report; the wire carries only the
code, so rules use `fatal` here. 22012 is listed both as non-fatal and as fatal: fatal wins.
10003 (an unhandled interrupt) is "never expected"; the guide says that if it occurs it is
fatal to the fabric.
"""

from __future__ import annotations

from collectors.compat import StrEnum, dataclass


class Category(StrEnum):
    NON_FATAL = "non-fatal"  # D.4
    FATAL = "fatal"  # D.5: fatal to the port
    ALWAYS_FATAL = "always-fatal"  # D.6: fatal to the fabric
    NOTABLE = "notable"  # D.7


@dataclass(frozen=True, slots=True)
class SXidInfo:
    code: int
    name: str
    category: Category
    fatal: bool
    recovery: str


_RESTART_VM = "Restart the guest VM (bare metal: reset the GPUs and NVSwitches); if the same " \
              "SXid returns, inspect the NVSwitch board"
_RESTART_HOST = "Restart the host to reset the whole fabric"
_NONE = "None: the NVSwitch corrected it"

_NF, _F, _AF, _NO = Category.NON_FATAL, Category.FATAL, Category.ALWAYS_FATAL, Category.NOTABLE


def _e(code: int, name: str, category: Category, recovery: str = "") -> SXidInfo:
    fatal = category in (_F, _AF) or code == 10003
    default = {_NF: _NONE, _F: _RESTART_VM, _AF: _RESTART_HOST, _NO: ""}[category]
    return SXidInfo(code, name, category, fatal, recovery or default)


_SBE = "Single bit ECC error"
_ENTRIES: tuple[SXidInfo, ...] = (
    # D.4 non-fatal
    _e(11004, "Ingress invalid ACL", _NF, "Check the fabric partition routing (NVSwitch-audit); "
       "restart the guest VM"),
    *(_e(c, _SBE, _NF) for c in (11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011,
                                  19049, 19055, 19057, 19059, 19062, 19065, 19068, 19071,
                                  24001, 24002, 24003)),
    _e(12028, "Egress non-posted PRIV error", _NF, "Restart the guest VM (bare metal: reset "
       "the GPUs and NVSwitches)"),
    _e(19084, "AN1 heartbeat timeout", _NF, "Reset all GPUs and NVSwitches"),
    _e(20001, "TX replay error", _NF, "None; a trunk port may lose throughput"),
    _e(20009, "RX short error rate", _NF),
    _e(20012, "Broken or inconsistent connection", _NF, "Unless it was an uncoordinated "
       "shutdown, check the link's mechanical connections"),
    _e(22013, "Minion link DLREQ interrupt", _NF, "None: can be ignored"),
    # D.5 fatal to the port
    _e(11001, "Ingress invalid command", _F),
    _e(11009, "Ingress invalid VCSet", _F),
    _e(11013, "Ingress header DBE", _F),
    _e(11018, "Ingress RID DBE", _F),
    _e(11019, "Ingress RLAN DBE", _F),
    _e(11020, "Ingress control parity", _F),
    _e(12001, "Egress crossbar overflow", _F),
    _e(12002, "Egress packet route", _F),
    _e(12022, "Egress input ECC DBE", _F),
    _e(12024, "Egress output ECC DBE", _F),
    _e(12025, "Egress credit overflow", _F),
    _e(12026, "Egress destination request ID error", _F),
    _e(12027, "Egress destination response ID error", _F),
    _e(12030, "Egress control parity error", _F),
    _e(12031, "Egress credit parity error", _F),
    _e(12032, "Egress flit type mismatch", _F),
    _e(14017, "TS ATO timeout", _F),
    _e(15001, "Route buffer over/underflow", _F),
    _e(15006, "Route transdone over/underflow", _F),
    _e(15009, "Route GLT DBE", _F),
    _e(15010, "Route parity", _F),
    _e(15012, "Route incoming DBE", _F),
    _e(15013, "Route credit parity", _F),
    _e(19047, "NCISOC HDR ECC DBE", _F),
    _e(19048, "NCISOC DAT ECC DBE", _F),
    _e(19054, "HDR RAM ECC DBE", _F),
    _e(19056, "DAT0 RAM ECC DBE", _F),
    _e(19058, "DAT1 RAM ECC DBE", _F),
    _e(19060, "CREQ RAM HDR ECC DBE", _F),
    _e(19061, "CREQ RAM DAT ECC DBE", _F),
    _e(19063, "Response RAM HDR ECC DBE", _F),
    _e(19064, "Response RAM DAT ECC DBE", _F),
    _e(19066, "COM RAM HDR ECC DBE", _F),
    _e(19067, "COM RAM DAT ECC DBE", _F),
    _e(19069, "RSP1 RAM HDR ECC DBE", _F),
    _e(19070, "RSP1 RAM DAT ECC DBE", _F),
    _e(20034, "LTSSM fault up (the link went down from active)", _F, "A100: restart the VM; "
       "H100: reset the GPU; if it persists, report the GPU"),
    _e(22012, "Minion link NA interrupt", _F, "Unless it was an uncoordinated shutdown, check "
       "the link's mechanical connections"),
    _e(24004, "Sourcetrack TCEN0 crumbstore DBE", _F),
    _e(24005, "Sourcetrack TCEN0 TD crumbstore DBE", _F),
    _e(24006, "Sourcetrack TCEN1 crumbstore DBE", _F),
    _e(24007, "Sourcetrack timeout error", _F),
    # D.6 fatal to the fabric
    _e(12020, "Egress sequence ID error", _AF),
    _e(22003, "Minion halt", _AF),
    _e(22011, "Minion exterror", _AF),
    _e(23001, "Ingress SRC-VC buffer overflow", _AF),
    _e(23002, "Ingress SRC-VC buffer underflow", _AF),
    _e(23003, "Egress DST-VC credit overflow", _AF),
    _e(23004, "Egress DST-VC credit underflow", _AF),
    _e(23005, "Ingress packet burst error", _AF),
    _e(23006, "Ingress packet sticky error", _AF),
    _e(23007, "Possible bubbles at ingress", _AF),
    _e(23008, "Ingress packet invalid dst error", _AF),
    _e(23009, "Ingress packet parity error", _AF),
    _e(23010, "Ingress SRC-VC buffer overflow", _AF),
    _e(23011, "Ingress SRC-VC buffer underflow", _AF),
    _e(23012, "Egress DST-VC credit overflow", _AF),
    _e(23013, "Egress DST-VC credit underflow", _AF),
    _e(23014, "Ingress packet burst error", _AF),
    _e(23015, "Ingress packet sticky error", _AF),
    _e(23016, "Possible bubbles at ingress", _AF),
    _e(23017, "Ingress credit parity error", _AF),
    # D.7 other notable
    _e(10001, "Host PRIV error", _NO, "None on its own; fatal SXids may follow"),
    _e(10002, "Host PRIV timeout", _NO, "None on its own; fatal SXids may follow"),
    _e(10003, "Host unhandled interrupt", _NO, "Reset all GPUs and NVSwitches"),
    _e(10004, "Host thermal event start", _NO, "Check the system's cooling"),
    _e(10005, "Host thermal event end", _NO, "Check the system's cooling"),
)


def _index(entries: tuple[SXidInfo, ...]) -> dict[int, SXidInfo]:
    table: dict[int, SXidInfo] = {}
    for e in entries:
        if e.code in table:
            raise ValueError(f"SXid {e.code} is listed twice")
        table[e.code] = e
    return table


SXID_CATALOG: dict[int, SXidInfo] = _index(_ENTRIES)
# The SXids a rule treats as a fatal NVSwitch error.
FATAL_SXIDS: frozenset[int] = frozenset(c for c, e in SXID_CATALOG.items() if e.fatal)


def sxid_info(code: int) -> SXidInfo | None:
    return SXID_CATALOG.get(code)
