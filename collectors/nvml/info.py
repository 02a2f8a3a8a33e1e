"""A GPU's identity through NVML (collectors.identity), read once per handle.

UUID (nvmlDeviceGetUUID), board serial (nvmlDeviceGetSerial), PCI bus id
(nvmlDeviceGetPciInfo's busId), name (nvmlDeviceGetName) and VBIOS (nvmlDeviceGetVbiosVersion)
do not change while a handle lives, so asking every round would cost five driver calls per GPU
for nothing (NVML API Reference, "Device Queries"). They are read when a GPU's handle is new (a
new NVML session, a handle that came back after a reset) and again every `refresh` seconds, so a
board swapped under a long-lived session is seen. NOT_SUPPORTED (GeForce boards have no serial)
is no value until then; any other failure is asked again next round. The driver version
(nvmlSystemGetDriverVersion) is one call per round, shared by every GPU.

No call here raises: a failing identity call costs that attribute, never the GPU's readings.
"""

from __future__ import annotations

import logging
from dataclasses import field

from collectors.compat import dataclass
from collectors.nvml.api import Handle, NvmlApi

log = logging.getLogger(__name__)

# collectors.identity.FIELDS name -> the NVML call that answers it for one handle.
_CALLS = {"uuid": "nvmlDeviceGetUUID", "serial": "nvmlDeviceGetSerial",
          "pci_bus_id": "nvmlDeviceGetPciInfo", "model": "nvmlDeviceGetName",
          "vbios": "nvmlDeviceGetVbiosVersion"}
DEFAULT_REFRESH = 600.0  # seconds between two reads of one handle's identity


@dataclass(slots=True)
class _Known:
    """One GPU's identity as read for `handle` at `at`; `pending` the attributes still to ask
    (their call failed, not as NOT_SUPPORTED)."""

    handle: Handle
    at: float
    said: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=lambda: list(_CALLS))


class IdentityCache:
    def __init__(self, refresh: float = DEFAULT_REFRESH) -> None:
        if refresh <= 0:
            raise ValueError("refresh must be positive")
        self.refresh = refresh
        self._known: dict[int, _Known] = {}

    def read(self, nvml: NvmlApi, index: int, handle: Handle, now: float) -> dict[str, str]:
        """GPU `index`'s identity (raw, by FIELDS name): cached for its handle, read when the
        handle is new, the cache `refresh` old, or an attribute's last call failed."""
        known = self._known.get(index)
        if known is None or known.handle is not handle or now - known.at >= self.refresh:
            known = self._known[index] = _Known(handle, now)
        if known.pending:
            still = []
            for name in known.pending:
                got = _ask(nvml, name, handle, index)
                if got is _FAILED:
                    still.append(name)
                elif isinstance(got, str) and got:
                    known.said[name] = got
            known.pending = still
        return dict(known.said)

    def cached(self, index: int) -> dict[str, str]:
        """What was last read of GPU `index` (a GPU lost this round is still that board)."""
        known = self._known.get(index)
        return {} if known is None else dict(known.said)

    def forget(self, index: int) -> None:
        self._known.pop(index, None)


def driver_version(nvml: NvmlApi) -> str | None:
    """The driver's version, or None when NVML does not say."""
    try:
        return _text(nvml.nvmlSystemGetDriverVersion())
    except Exception as exc:  # never the readings' failure: see the module doc
        log.debug("nvmlSystemGetDriverVersion failed: %s", exc)
        return None


class _Failed:
    pass


_FAILED = _Failed()


def _ask(nvml: NvmlApi, name: str, handle: Handle, index: int) -> str | _Failed | None:
    """One attribute: its text, None when NOT_SUPPORTED (or unreadable), _FAILED to ask
    again next round."""
    fn = _CALLS[name]
    try:
        got = getattr(nvml, fn)(handle)
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return None
    except Exception as exc:  # a lost GPU, a timeout, a binding's decode error: next round
        log.debug("gpu %d: %s failed: %s", index, fn, exc)
        return _FAILED
    if name == "pci_bus_id":
        got = getattr(got, "busId", None)
    return _text(got)


def _text(v: object) -> str | None:
    """A binding's string: str in nvidia-ml-py 11.515+, bytes before (ctypes char arrays)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None
