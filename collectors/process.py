"""Running a tool (nvidia-smi, ibstat, ipmitool) as an argv list with a hard timeout.

Tools hang when what they talk to does (a GPU fallen off the bus, a stuck driver lock, a BMC
that stops answering), so a call is bounded. It runs in its own session so that on timeout the
whole process group is killed: a wrapper script's children would otherwise keep the pipes open
and block the read.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

RunResult = tuple[int, str, str]  # exit status, stdout, stderr


def run_process(argv: Sequence[str], timeout: float,
                env: Mapping[str, str] | None = None) -> RunResult:
    """Runs argv (with `env` as its whole environment when given): TimeoutError past
    `timeout` seconds (the group killed), OSError when the binary cannot start."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env=None if env is None else dict(env))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise TimeoutError(f"{argv[0]} did not finish within {timeout:g} s; killed") from None
    except BaseException:
        _kill_group(proc)
        raise
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.communicate()  # reap it and close the pipes
