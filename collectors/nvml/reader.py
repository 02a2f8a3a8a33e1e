"""NVML calls for one GPU, with what the GPU does not support remembered.

NVML answers NOT_SUPPORTED for whole feature classes (retired pages on Ampere, row remapping
before it, NVLink on PCIe cards, T.Limit before Hopper drivers). Asking again every 5 s costs
driver round-trips and floods logs for nothing, so such a call is recorded once, under the
catalog metric names it feeds, and skipped from then on.

What a GPU in a bad state answers is kept as its `gpu_unreadable` state for the tick (`state`):
NVML_ERROR_RESET_REQUIRED from any call is 2; NVML_ERROR_UNKNOWN is 1, but only from a call every
GPU answers (CORE): an unknown error from one feature's call is that feature's, not the GPU's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from collectors.nvml.api import NvmlApi

log = logging.getLogger(__name__)

T = TypeVar("T")


class GpuLost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST): stop reading it this tick."""


# Calls every GPU answers (catalog metric names): an unknown error there is the GPU's.
CORE = frozenset({"gpu_temp", "power_draw", "gpu_util", "sm_clock"})
UNKNOWN, RESET = 1, 2  # gpu_unreadable values (collectors/catalog.py)


class GpuReader:
    def __init__(self, nvml: NvmlApi, index: int) -> None:
        self.nvml = nvml
        self.index = index
        self.unsupported: set[str] = set()
        # Names whose call went to the legacy fallback because the driver lacks the new symbol.
        self._legacy: set[str] = set()
        self._lost = nvml.NVMLError_GpuIsLost
        self._not_supported = (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)
        self._missing_fn = nvml.NVMLError_FunctionNotFound
        self._error = nvml.NVMLError
        self._unknown = nvml.NVMLError_Unknown
        self._reset = nvml.NVMLError_ResetRequired
        self.state = 0  # this tick's gpu_unreadable, from the errors its calls answered

    def call(self, names: str | tuple[str, ...], fn: Callable[..., T], *args: object,
             fallback: Callable[..., T] | None = None) -> T | None:
        """fn(*args), or None when unsupported or failing this tick. `fallback` is the older
        spelling of the same call, used for good once the driver lacks `fn`'s symbol."""
        keys = (names,) if isinstance(names, str) else names
        if keys[0] in self.unsupported:
            return None
        if fallback is not None and keys[0] in self._legacy:
            fn, fallback = fallback, None
        try:
            return fn(*args)
        except self._lost:
            raise GpuLost from None
        except self._not_supported as exc:
            if fallback is not None and isinstance(exc, self._missing_fn):
                self._legacy.add(keys[0])
                return self.call(names, fallback, *args)
            self.mark(*keys)
            return None
        except self._reset:
            self.state = max(self.state, RESET)
            return None
        except self._error as exc:
            if isinstance(exc, self._unknown) and keys[0] in CORE:
                self.state = max(self.state, UNKNOWN)
            # Transient (timeout, busy, permission): missing this tick, asked again next tick.
            log.debug("gpu %d: %s failed: %s", self.index, getattr(fn, "__name__", fn), exc)
            return None

    def mark(self, *names: str) -> None:
        new = [n for n in names if n not in self.unsupported]
        if new:
            log.info("gpu %d does not support %s; not asking again", self.index, ", ".join(new))
            self.unsupported.update(new)
