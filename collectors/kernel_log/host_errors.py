"""The message part of host hardware-error kernel lines: CPU machine checks and EDAC memory errors.

Machine checks (x86, arch/x86/kernel/cpu/mce/core.c): every line carries the `[Hardware Error]: `
tag (`mce: ` in front since Linux 4.x). One machine check is reported as several lines:

    mce: [Hardware Error]: Machine check events logged
    mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400
    mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff812e14c1> {intel_idle+0xb1/0x170}
    mce: [Hardware Error]: TSC 49587b8e321cb ADDR 3fff8e14c1 MISC 86
    mce: [Hardware Error]: PROCESSOR 0:206d6 TIME 1380020839 SOCKET 0 APIC 0 microcode 710

The "events logged" notice (mce_notify_irq, rate-limited to 2 a minute) is printed for each
record before its detail, and the detail only when no other consumer (an EDAC driver, rasdaemon)
takes the record; on many fleets the notice is all the log shows. So a machine check is counted
at its notice, and a `CPU n: Machine Check...` header counts only when no notice announced it
(see parser.MCE_NOTICE_S); every other tagged line (RIP, TSC, PROCESSOR, "Run the above through
'mcelog --ascii'", a panic reason, AMD's decoded lines) belongs to a report already counted.
APEI's `{1}[Hardware Error]: ...` lines describe firmware-first errors: the EDAC lines (ghes_edac)
and a machine-check notice count those.

EDAC (drivers/edac/edac_mc.c, edac_ce_error / edac_ue_error) prints one line per report:

    EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 ...)
    EDAC MC1: 2 UE memory read error on DIMM_B1 (page:0x... offset:0x0 grain:32)

Kernels before 3.5 (edac_mc_handle_ce / _ue) print no count: "EDAC MC0: CE page 0x1a2b, ...",
"EDAC MC0: UE row 2, ...", "EDAC MC0: CE - no information available: ..." (one error each).
EDAC lines without CE/UE ("EDAC MC0: Giving out device to module skx_edac ...") are driver
notices, not errors.
"""

from __future__ import annotations

import re
from enum import Enum

from collectors.compat import dataclass

HW_ERR_TAG = "[Hardware Error]"

_MCE_NOTICE = re.compile(r"\[Hardware Error\]: Machine check events logged")
# "CPU 3: Machine Check: 0 Bank 5: be00000000800400"; "Machine Check Exception" when MCIP was
# set (raised as an exception, not found by polling or CMCI).
_MCE_HEADER = re.compile(
    r"\[Hardware Error\]: CPU (?P<cpu>\d+): Machine Check(?P<exc> Exception)?: "
    r"(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>\d+): (?P<status>[0-9a-fA-F]{1,16})\b"
)
# The driver name may sit between "EDAC" and "MC<n>" (edac_mc_chipset_printk).
_EDAC = re.compile(r"\bEDAC (?:[\w-]+ )?MC(?P<mc>\d+): (?:(?P<count>\d+) )?(?P<kind>CE|UE)\b"
                   r"\s*(?P<detail>.*)$")

# MCi_STATUS bit 61 (UC): the error was not corrected (Intel SDM vol. 3B, 16.3.2.2; AMD APM
# vol. 2, 9.3.1.2 alike).
_STATUS_UC = 1 << 61
MAX_EDAC_COUNT = 1 << 31  # error_count is an int in the kernel; more is a corrupt line


class MceKind(Enum):
    NOTICE = "notice"  # "Machine check events logged"
    HEADER = "header"  # "CPU n: Machine Check[ Exception]: ... Bank b: status"
    DETAIL = "detail"  # any other line of a report


@dataclass(frozen=True, slots=True)
class MceMessage:
    kind: MceKind
    cpu: int | None = None
    bank: int | None = None
    status: int | None = None  # MCi_STATUS
    exception: bool = False

    @property
    def uncorrected(self) -> bool | None:
        """Whether MCi_STATUS says UC; None when the line gave no status (a notice)."""
        return None if self.status is None else bool(self.status & _STATUS_UC)


@dataclass(frozen=True, slots=True)
class EdacMessage:
    mc: int
    kind: str  # "CE" or "UE"
    count: int
    detail: str


def is_mce_line(line: str) -> bool:
    """A machine-check line: the tag after `mce: `, or a pre-4.x header without the prefix.
    APEI's `{n}[Hardware Error]:` lines are not machine-check reports."""
    return "mce: [Hardware Error]" in line or _MCE_HEADER.search(line) is not None


def parse_mce(message: str) -> MceMessage:
    if _MCE_NOTICE.search(message):
        return MceMessage(MceKind.NOTICE)
    m = _MCE_HEADER.search(message)
    if m is None:
        return MceMessage(MceKind.DETAIL)
    return MceMessage(MceKind.HEADER, cpu=int(m["cpu"]), bank=int(m["bank"]),
                      status=int(m["status"], 16), exception=m["exc"] is not None)


def parse_edac(message: str) -> EdacMessage | str | None:
    """The CE/UE report in an EDAC line, why it cannot be counted, or None for a driver notice."""
    m = _EDAC.search(message)
    if m is None:
        return None
    count = 1 if m["count"] is None else int(m["count"]) if len(m["count"]) <= 10 else None
    if count is None or count >= MAX_EDAC_COUNT:
        return f"EDAC {m['kind']} count {m['count'][:12]} is out of range"
    return EdacMessage(mc=int(m["mc"]), kind=m["kind"], count=count,
                       detail=m["detail"].strip())
