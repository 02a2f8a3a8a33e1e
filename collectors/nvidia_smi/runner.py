"""The runner nvidia-smi is called through (collectors.process), injectable for tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from collectors.process import RunResult, run_process

# Runs argv with a timeout in seconds. Raises TimeoutError past it and OSError when the binary
# cannot be started.
Runner = Callable[[Sequence[str], float], RunResult]

__all__ = ["RunResult", "Runner", "run_process"]
