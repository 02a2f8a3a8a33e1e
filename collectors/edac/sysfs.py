"""The EDAC memory-controller tree in sysfs: node totals of corrected / uncorrected memory errors.

Layout (Linux Documentation/admin-guide/ras.rst, "EDAC - Error Detection And Correction", and
Documentation/ABI/testing/sysfs-devices-edac), under /sys/devices/system/edac/mc:

    mc<N>/ce_count, ue_count             every error of the controller since the driver loaded
                                         or the last write to reset_counters
    mc<N>/ce_noinfo_count, ue_noinfo_count  those the driver could not put on a DIMM
    mc<N>/mc_name, seconds_since_reset
    mc<N>/dimm<M>/ or rank<M>/           dimm_ce_count, dimm_ue_count, dimm_label, dimm_location
    mc<N>/csrow<M>/                      ce_count, ue_count, ch<K>_ce_count, ch<K>_dimm_label
                                         (the legacy chip-select view of the same errors)

edac_mc.c counts each error once on the controller and once on its DIMM, or in the noinfo
count when no DIMM is known: ce_count = sum of dimm_ce_count + ce_noinfo_count. The node totals
are the sum of the controllers' ce_count / ue_count; a controller without them, or whose file
does not read as a count, sums its DIMMs and noinfo count instead.

The wire carries only the node totals (the agreed schema has no memory-controller entity). The
per-controller and per-DIMM detail stays on the reading (McCounts, DimmCounts) and in notes
naming each DIMM with errors, so the operator learns which module to replace; a detail file that
cannot be read costs only a note. A controller whose count cannot be had either way withholds
that node total for the round (a partial sum would look like a counter reset), with a rejection.
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.lineprotocol import FieldValue, Point

EDAC_ROOT = Path("/sys/devices/system/edac/mc")
_MC = re.compile(r"^mc(\d+)$")
_DIMM = re.compile(r"^(?:dimm|rank)(\d+)$")
_CSROW = re.compile(r"^csrow(\d+)$")
_CHANNEL_CE = re.compile(r"^ch(\d+)_ce_count$")
MAX_COUNT = 1 << 53  # the kernel's counters are u32; past a float's exact range is garbage


@dataclass(frozen=True, slots=True)
class DimmCounts:
    name: str  # "dimm3", "rank0", or "csrow2/ch1" in the legacy view
    label: str  # dimm_label / ch<K>_dimm_label: the board's silkscreen name where set
    location: str
    ce: int | None
    ue: int | None


@dataclass(frozen=True, slots=True)
class McCounts:
    name: str  # "mc0"
    driver: str  # mc_name
    ce: int | None
    ue: int | None
    ce_noinfo: int | None
    ue_noinfo: int | None
    seconds_since_reset: int | None
    dimms: tuple[DimmCounts, ...]


@dataclass(slots=True)
class EdacReading:
    controllers: list[McCounts] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, FieldValue]:
        """edac_ce_total / edac_ue_total over every controller, each left out when a controller's
        count is unknown; empty when there is no controller."""
        out: dict[str, FieldValue] = {}
        for metric, attr in (("edac_ce_total", "ce"), ("edac_ue_total", "ue")):
            counts = [_controller_total(mc, attr) for mc in self.controllers]
            if counts and all(c is not None for c in counts):
                out[metric] = sum(c for c in counts if c is not None)
        return out

    def point(self, host: str, ts_ns: int) -> Point | None:
        fields = self.totals()
        return Point("node", {"host": host}, fields, ts_ns) if fields else None


def _controller_total(mc: McCounts, attr: str) -> int | None:
    own: int | None = getattr(mc, attr)
    if own is not None:
        return own
    parts: list[int | None] = [getattr(d, attr) for d in mc.dimms
                               if not d.name.startswith("csrow")]
    noinfo: int | None = getattr(mc, f"{attr}_noinfo")
    if not parts or noinfo is None or any(p is None for p in parts):
        return None
    return sum(p for p in parts if p is not None) + noinfo


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _count(path: Path, why: list[str]) -> int | None:
    """A counter file's value; None and a reason in `why` when present but unreadable or bad."""
    text = _text(path)
    if text is None:
        if path.exists():
            why.append(f"{path.name} unreadable")
        return None
    if not (text.isascii() and text.isdigit()) or int(text) >= MAX_COUNT:
        why.append(f"{path.name} is {text[:20]!r}, not a count")
        return None
    return int(text)


def _sorted(entries: list[Path], pattern: re.Pattern[str]) -> list[tuple[Path, re.Match[str]]]:
    found = [(p, m) for p in entries if (m := pattern.match(p.name)) and p.is_dir()]
    return sorted(found, key=lambda x: int(x[1][1]))


def _dimms(mc: Path, notes: list[str]) -> tuple[DimmCounts, ...]:
    entries = list(mc.iterdir())
    out: list[DimmCounts] = []
    for d, _ in _sorted(entries, _DIMM):
        why: list[str] = []
        out.append(DimmCounts(d.name, _text(d / "dimm_label") or "",
                              _text(d / "dimm_location") or "",
                              _count(d / "dimm_ce_count", why), _count(d / "dimm_ue_count", why)))
        notes += [f"{mc.name}/{d.name}: {w}" for w in why]
    if out:
        return tuple(out)
    # Drivers that only give the legacy view: one entry per chip-select row and channel.
    for row, _ in _sorted(entries, _CSROW):
        why = []
        row_ue = _count(row / "ue_count", why)
        channels = sorted((m for p in row.iterdir() if (m := _CHANNEL_CE.match(p.name))),
                          key=lambda m: int(m[1]))
        for m in channels:
            out.append(DimmCounts(f"{row.name}/ch{m[1]}",
                                  _text(row / f"ch{m[1]}_dimm_label") or "", "",
                                  _count(row / m[0], why), None))
        if not channels:
            out.append(DimmCounts(row.name, "", "", _count(row / "ce_count", why), row_ue))
        notes += [f"{mc.name}/{row.name}: {w}" for w in why]
    return tuple(out)


def read_edac(root: Path = EDAC_ROOT) -> EdacReading:
    """Every memory controller under `root` (a copy of the tree in tests). OSError when `root`
    itself cannot be listed (no EDAC driver loaded)."""
    out = EdacReading()
    for mc, _ in _sorted(list(root.iterdir()), _MC):
        why: list[str] = []
        ce, ue = _count(mc / "ce_count", why), _count(mc / "ue_count", why)
        detail: list[str] = []
        counts = McCounts(
            name=mc.name, driver=_text(mc / "mc_name") or "",
            ce=ce, ue=ue,
            ce_noinfo=_count(mc / "ce_noinfo_count", detail),
            ue_noinfo=_count(mc / "ue_noinfo_count", detail),
            seconds_since_reset=_count(mc / "seconds_since_reset", detail),
            dimms=_dimms(mc, detail))
        out.notes += [f"{mc.name}/{w}" if not w.startswith(mc.name) else w for w in detail]
        out.controllers.append(counts)
        for w in why:  # the controller's own count: its DIMMs may still give the total
            attr = "ce" if w.startswith("ce_") else "ue"
            if _controller_total(counts, attr) is None:
                out.rejected.append(Rejection(f"{mc.name}/{w}", metric=f"edac_{attr}_total"))
            else:
                out.notes.append(f"{mc.name}/{w}; its DIMMs and noinfo count give the total")
        for d in counts.dimms:
            if d.ce or d.ue:
                label = f" {d.label!r}" if d.label else ""
                out.notes.append(f"{mc.name}/{d.name}{label}: {d.ce or 0} corrected, "
                                 f"{d.ue or 0} uncorrected")
    return out
