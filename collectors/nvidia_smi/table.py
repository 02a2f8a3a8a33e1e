"""The default `nvidia-smi` table, for the one thing the other outputs may not show: "ERR!".

    |===============================+======================+======================|
    |   0  NVIDIA GeForce ...  Off  | 00000000:01:00.0 Off |                    0 |
    |ERR!   38C    P5    49W / 450W |   2021MiB / 23028MiB |      0%   E. Process |

nvidia-smi prints "ERR!" in a cell it failed to read (the nvidia-smi man page; GPUd treats it as
a GPU error). Each GPU is the row that starts with its index and the rows under it up to the next
"+---" rule; its `gpu_unreadable` is the worst state any of its cells prints (every cell of this
table is a reading all GPUs answer, so "Unknown Error" counts too). The tables after the GPUs'
("MIG devices:", "Processes:") are not read.
"""

from __future__ import annotations

import re

from collectors.lineprotocol import Point
from collectors.nvidia_smi import states
from collectors.nvidia_smi.values import gpu_point

_BANNER = re.compile(r"^\|\s*NVIDIA-SMI\s+\d", re.M)
_GPU_ROW = re.compile(r"^\|\s+(\d{1,4})\s+\S")
_RULE = re.compile(r"^\+-")
_END = re.compile(r"MIG devices:|Processes:")


def looks_like_table(text: str) -> bool:
    return _BANNER.search(text) is not None


def parse_table(text: str, host: str, ts_ns: int) -> list[Point]:
    """One `gpu` point per GPU row, carrying `gpu_unreadable` only."""
    found: dict[int, int] = {}
    gpu: int | None = None
    for line in text.splitlines():
        if _END.search(line):
            break
        m = _GPU_ROW.match(line)
        if m:
            gpu = int(m.group(1))
            found[gpu] = states.READABLE
        elif _RULE.match(line) or not line.startswith("|"):
            gpu = None
        if gpu is not None:
            cells = [c for c in re.split(r"\||\s{2,}", line) if c.strip()]
            found[gpu] = states.worst([found[gpu],
                                       *(states.state_of(c, core=True) for c in cells)])
    return [gpu_point(host, g, {states.FIELD: s}, ts_ns) for g, s in found.items()]
