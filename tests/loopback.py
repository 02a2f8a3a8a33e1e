"""A real server binary (influxd, Prometheus, Alertmanager) run by tests on loopback: started
with its output in a log file beside its data, polled until it answers, stopped by SIGTERM
(SIGKILL after 20 s). One place for the start-and-wait loop the server wrappers share."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx


class Daemon:
    """`root` holds the server's data and its `<name>.log`."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, argv: Sequence[str], ready: Callable[[], bool], timeout_s: float) -> None:
        """Start `argv` and return once `ready()` (an HTTP probe) says yes; raise with the log's
        path if the process exits first or is not ready within `timeout_s`."""
        log_path = self.root / f"{self.name}.log"
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see "
                                   f"{log_path}")
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} was not ready within {timeout_s} s; see {log_path}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def answers(url: str, status: int = 200) -> Callable[[], bool]:
    """A readiness probe: GET `url` answers `status`."""
    return lambda: httpx.get(url, timeout=1).status_code == status
