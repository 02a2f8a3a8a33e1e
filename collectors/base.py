"""The collector protocol: one verb, `collect`, returning a columnar Batch.

A collector that fails does not raise: it returns an empty batch and reports `up=False` with
the reason in its `status`, so the service can export `collector_up` and keep going.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from collectors.compat import dataclass
from collectors.frames import Batch


@dataclass(slots=True)
class CollectorStatus:
    up: bool = True
    reason: str = ""
    exhausted: bool = False  # a finite source (a replayed trace) has nothing more to give


@runtime_checkable
class Collector(Protocol):
    name: str
    status: CollectorStatus

    def collect(self) -> Batch: ...


@runtime_checkable
class Starts(Protocol):
    """A collector with work to begin before its first collect (a background reader)."""

    def start(self) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """A collector that holds something to release (a client, a file, a thread)."""

    def close(self) -> None: ...
