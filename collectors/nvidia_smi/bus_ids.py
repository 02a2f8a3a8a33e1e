"""`nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` to the GPU bus map.

A GPU in a bad state prints an NVML error in place of its bus id ("0, [Unknown Error]") or a
"Unable to determine the device handle" line in place of its row, and nvidia-smi then exits
non-zero while the other rows are good. Such rows are left out (the GPU's state is the nvidia-smi
collector's to report): the map holds every GPU whose index and bus id both read.
"""

from __future__ import annotations

from collectors.kernel_log.messages import normalize_bus_id


def read_bus_map(stdout: str) -> dict[str, int]:
    """PCI bus id, as nvidia-smi prints it -> GPU index, for the rows where both read."""
    out: dict[str, int] = {}
    for line in stdout.splitlines():
        index, _, bus = (x.strip() for x in line.partition(","))
        if index.isascii() and index.isdigit() and normalize_bus_id(bus) is not None:
            out[bus] = int(index)
    return out
