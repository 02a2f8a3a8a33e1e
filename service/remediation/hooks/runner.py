"""Running scheduler commands (scontrol, an operator's script) as argv lists, never through a
shell, with a hard timeout. Injectable so a hook can be given a runner with extra environment
(e.g. SLURM_CONF) or a recording one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

MAX_OUTPUT = 1_000_000  # bytes kept per stream: a chatty command must not exhaust memory


@dataclass(frozen=True, slots=True)
class Completed:
    returncode: int  # negative: killed by that signal (e.g. -9 after a timeout)
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


class CommandRunner(Protocol):
    def run(self, argv: list[str], timeout_s: float) -> Completed:
        """Run `argv` (argv[0] looked up on PATH). Raises OSError (FileNotFoundError,
        PermissionError) when argv[0] cannot be executed at all."""
        ...


class SubprocessRunner:
    """The real runner. The child inherits our environment (so SLURM_CONF, PATH and munge's
    socket settings reach scontrol) plus `env` on top."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or {})

    def run(self, argv: list[str], timeout_s: float) -> Completed:
        if not argv:
            raise ValueError("empty argv")
        env = {**os.environ, **self.env} if self.env else None
        start = time.monotonic()
        # A session of its own so a timeout kills the whole process group: a script's
        # children would otherwise keep our pipes open and hang communicate().
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a grandchild escaped the group
                out, err = b"", b""
                proc.kill()
                proc.wait(timeout=5)
        return Completed(returncode=proc.returncode, stdout=_text(out), stderr=_text(err),
                         duration_s=time.monotonic() - start, timed_out=timed_out)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _text(data: bytes | None) -> str:
    return (data or b"")[:MAX_OUTPUT].decode("utf-8", errors="replace")


def one_line(text: str, limit: int = 300) -> str:
    """Command output squeezed for a Step detail: whitespace collapsed, bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
