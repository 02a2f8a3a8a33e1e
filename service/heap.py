"""Handing freed heap memory back to the system (glibc's `malloc_trim`).

A tick at 10,000 GPUs makes numpy temporaries of one to tens of MB (a metric over 180,000 NVLink
links, an hour's rollup). glibc serves the first from mmap, but each one freed raises its mmap
threshold to its size (up to 32 MB), so later ones come from the heap, and a freed heap page
stays in the process until the heap is trimmed: about 60 MB of RSS at 10,000 GPUs that holds
nothing (`python -m bench.memory`). `malloc_trim(0)` returns every free page to the system; it
moves and changes nothing the process holds, so no value any part reads can differ. It walks
the heap (about 9 ms at 10,000 GPUs), so the pipeline calls it at most once a minute by the
service's clock, and at once after the window store grew or forgot entities (when the most was
freed). Where the C library has no `malloc_trim` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_EVERY_S = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        fn = libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc: nothing to call
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


class HeapTrim:
    """Trims the heap after a tick when a minute passed since the last trim or the caller says
    the layout of what it holds changed (grown, compacted)."""

    def __init__(self, every_s: float = TRIM_EVERY_S,
                 trim: Callable[[int], int] | None = None) -> None:
        self.every_s = every_s
        self._trim = trim if trim is not None else _malloc_trim()
        self._last = float("-inf")
        self.trims = 0
        self.last_s = 0.0  # how long the newest trim took

    @property
    def available(self) -> bool:
        return self._trim is not None

    def after_tick(self, now: float, changed: bool = False) -> bool:
        """Trim if due; True when it did. A clock that went back counts as due."""
        if self._trim is None:
            return False
        if not changed and 0.0 <= now - self._last < self.every_s:
            return False
        t0 = time.perf_counter()
        self._trim(0)
        self.last_s = time.perf_counter() - t0
        self._last = now
        self.trims += 1
        log.debug("heap trimmed in %.1f ms", self.last_s * 1e3)
        return True
