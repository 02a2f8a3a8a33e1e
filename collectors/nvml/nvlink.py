"""Per-link NVLink readings for the `nvlink` measurement.

Links are walked from 0 up to NVML_NVLINK_MAX_LINKS - 1 until NVML says the link does not
exist (NOT_FOUND or INVALID_ARGUMENT; some drivers answer NOT_SUPPORTED past the last link).
NOT_SUPPORTED on link 0 means the GPU has no NVLink at all (PCIe cards): recorded once.
"""

from __future__ import annotations

from collectors.nvml.api import Handle
from collectors.nvml.reader import GpuLost, GpuReader

COUNTERS = (
    ("nvlink_crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("nvlink_crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("nvlink_replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("nvlink_recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
)
METRICS = ("nvlink_state", *(name for name, _ in COUNTERS))


def read_links(r: GpuReader, h: Handle) -> dict[int, dict[str, float]]:
    """{link: {field: value}}; empty for a GPU without NVLink. Raises GpuLost."""
    n = r.nvml
    if "nvlink_state" in r.unsupported:
        return {}
    no_link = (n.NVMLError_NotFound, n.NVMLError_InvalidArgument)
    unsupported = (n.NVMLError_NotSupported, n.NVMLError_FunctionNotFound)
    links: dict[int, dict[str, float]] = {}
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        try:
            state = n.nvmlDeviceGetNvLinkState(h, link)
        except n.NVMLError_GpuIsLost:
            raise GpuLost from None
        except no_link:
            break
        except unsupported:
            if link == 0:
                r.mark(*METRICS)
            break
        except n.NVMLError:
            continue  # this link failed to answer this tick; later links may still exist
        fields = {"nvlink_state": 1.0 if state else 0.0}
        for name, counter in COUNTERS:
            v = r.call(name, n.nvmlDeviceGetNvLinkErrorCounter, h, link, getattr(n, counter))
            if v is not None:
                fields[name] = float(v)
        links[link] = fields
    return links
