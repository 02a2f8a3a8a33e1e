"""`nvidia-smi nvlink --status` to per-link `nvlink` points (nvlink_state 1 or 0).

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)
         Link 0: 25 GB/s
         Link 3: <inactive>

A GPU whose links are all down prints no links, only "NVML: Unable to retrieve NVLink
information as all links are inactive". That is the failure an operator must see, so it is never
dropped: with a known link count each of its links gets nvlink_state 0, without one it raises.
"""

from __future__ import annotations

import re

from collectors.lineprotocol import Point
from collectors.nvidia_smi.values import SmiParseError, nvlink_point

_GPU = re.compile(r"^GPU (\d+):")
_LINK = re.compile(r"^\s+Link (\d+):\s*(.*?)\s*$")
_ALL_INACTIVE = "all links are inactive"


class NvlinkInactiveError(SmiParseError):
    """Every link of some GPU is inactive and the link count to report them by is unknown."""

    def __init__(self, gpus: list[int]) -> None:
        super().__init__(f"all NVLink links are inactive on GPU {', '.join(map(str, gpus))} "
                         "(nvidia-smi: 'Unable to retrieve NVLink information')")
        self.gpus = gpus


def parse_nvlink_status(text: str, host: str, ts_ns: int, *,
                        links_per_gpu: int | None = None) -> list[Point]:
    """`links_per_gpu` is how many links an all-inactive GPU has; when None, the most links any
    other GPU in the output reports (the GPUs of one node are the same SKU)."""
    links: dict[int, list[tuple[int, float]]] = {}
    inactive: list[int] = []
    gpu: int | None = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            gpu = int(m.group(1))
            links[gpu] = []
            continue
        if gpu is None:
            continue
        if _ALL_INACTIVE in line.lower():  # 595 drivers print "inActive"
            inactive.append(gpu)
            continue
        lm = _LINK.match(line)
        if lm:
            # An active link prints its speed; a down one "<inactive>".
            state = 0.0 if "inactive" in lm.group(2).lower() else 1.0
            links[gpu].append((int(lm.group(1)), state))
    if not links:
        raise SmiParseError("no 'GPU <n>:' line in nvidia-smi nvlink --status output")
    count = links_per_gpu or max((len(v) for v in links.values()), default=0)
    if inactive and count == 0:
        raise NvlinkInactiveError(inactive)
    for g in inactive:
        links[g] = [(link, 0.0) for link in range(count)]
    return [nvlink_point(host, g, link, state, ts_ns)
            for g, states in links.items() for link, state in states]
