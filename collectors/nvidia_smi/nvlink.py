"""`nvidia-smi nvlink --status` to per-link `nvlink` points (nvlink_state 1 or 0).

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)
         Link 0: 25 GB/s
         Link 3: <inactive>

Three other answers come per GPU, spelled differently across drivers ("NVLink", "Nvlink";
"inactive", "inActive"):

- "Device does not have or support Nvlink" (an L40S, a PCIe board): the GPU has no links, so no
  points, and a note says so;
- "NVML: Unable to retrieve NVLink information as all links are inactive": every link is down,
  the failure an operator must see. It is never dropped: each link gets nvlink_state 0, counted
  by `links_per_gpu`, else the most links another GPU of the output prints (the GPUs of one node
  are one SKU), else the SKU's known count, else link 0 alone (a GPU that says its links are
  inactive has at least one) with a note that the count is unknown;
- lines about MIG devices of a GPU in MIG mode, which name no link and are skipped.

A link is up only when its line gives a speed ("26.562 GB/s") and down only when it says
"<inactive>". Any other status (cut off: "Link 9:", or unreadable) is no reading at all: the link
is refused with its line number and reported neither up nor down, and the other links are kept.
"""

from __future__ import annotations

import re

from collectors.frames import Entity, Rejection
from collectors.lineprotocol import Point
from collectors.nvidia_smi.values import SmiParseError, nvlink_point

_GPU = re.compile(r"^GPU (\d+):\s*(.*)$")
_LINK = re.compile(r"^\s+Link (\d+):\s*(.*?)\s*$")
_UP = re.compile(r"\d+(?:\.\d+)?\s*[KMGT]?i?B/s", re.I)  # the link's speed
_DOWN = re.compile(r"<\s*inactive\s*>", re.I)
_ALL_INACTIVE = "all links are inactive"
_NO_NVLINK = re.compile(r"does not have or support nvlink", re.I)
# Links per GPU of the NVLink SKUs a fleet runs, by the product name nvidia-smi prints.
_SKU_LINKS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"V100-SXM"), 6),
    (re.compile(r"A100-SXM"), 12),
    (re.compile(r"H100 80GB HBM3|H100-SXM|H200(?! NVL)|B200"), 18),
)


def parse_nvlink_status(text: str, host: str, ts_ns: int, *, links_per_gpu: int | None = None,
                        notes: list[str] | None = None,
                        rejected: list[Rejection] | None = None) -> list[Point]:
    """Points for every link of every GPU; what an operator should know besides (a GPU without
    NVLink, a guessed link count) is appended to `notes` when given. A link line with no
    readable status is appended to `rejected`; without that list, to `notes`, so that it is
    said somewhere."""
    links: dict[int, list[tuple[int, float]]] = {}
    names: dict[int, str] = {}
    inactive: list[int] = []
    without: list[int] = []
    refused: set[int] = set()
    say = notes.append if notes is not None else (lambda _: None)
    gpu: int | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _GPU.match(line)
        if m:
            gpu = int(m.group(1))
            links[gpu] = []
            names[gpu] = re.sub(r"\s*\(UUID:.*$", "", m.group(2))
            continue
        if gpu is None:
            continue
        if _ALL_INACTIVE in line.lower():  # 595 drivers print "inActive"
            inactive.append(gpu)
        elif _NO_NVLINK.search(line):
            without.append(gpu)
        elif lm := _LINK.match(line):
            link, status = int(lm.group(1)), lm.group(2)
            if _UP.fullmatch(status):
                links[gpu].append((link, 1.0))
            elif _DOWN.fullmatch(status):
                links[gpu].append((link, 0.0))
            else:  # cut off or unreadable: neither up nor down
                refused.add(gpu)
                why = (f"GPU {gpu} link {link}: no readable status "
                       f"({status[:60]!r}; a speed or <inactive> was expected)")
                if rejected is not None:
                    rejected.append(Rejection(why, n, Entity.nvlink(host, gpu, link).key,
                                              "nvlink_state"))
                else:
                    say(f"line {n}: {why}")
    if not links:
        raise SmiParseError("no 'GPU <n>:' line in nvidia-smi nvlink --status output")
    told = set(inactive) | set(without) | refused | {g for g, v in links.items() if v}
    if not told:
        raise SmiParseError("no GPU of this output gives a link status (no 'Link <n>:' line, "
                            "no 'all links are inactive'): is it nvidia-smi nvlink --status?")
    for g in without:
        say(f"GPU {g} has no NVLink (nvidia-smi: the device does not have or support NVLink)")
    seen = max((len(v) for v in links.values()), default=0)
    for g in inactive:
        count = links_per_gpu or seen or _sku_links(names[g])
        if count is None:
            count = 1
            say(f"GPU {g}: all NVLink links are inactive and its link count is unknown "
                f"({names[g][:60]!r}); link 0 is reported down for all of them")
        links[g] = [(link, 0.0) for link in range(count)]
    return [nvlink_point(host, g, link, state, ts_ns)
            for g, states in links.items() for link, state in states]


def _sku_links(name: str) -> int | None:
    for pattern, count in _SKU_LINKS:
        if pattern.search(name):
            return count
    return None


def looks_like_nvlink_status(text: str) -> bool:
    """Whether a capture is `nvlink --status` output: it starts with a 'GPU <n>:' line and
    some line gives a link status. `nvidia-smi -L` starts alike but names no link."""
    first = next((x for x in text.splitlines() if x.strip()), "")
    if not _GPU.match(first):
        return False
    low = text.lower()
    return ("nvlink" in low or _ALL_INACTIVE in low
            or any(_LINK.match(x) for x in text.splitlines()))
