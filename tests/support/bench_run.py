"""A benchmark harness run as a test runs it: a subprocess with a hang guard. On the guard it
is asked to stop (SIGTERM: bench.soak and bench.cluster stop the servers and replicas they
started, each in a session of its own, which a kill of the harness alone would leave
running), and killed only if it does not stop within a grace period."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

GRACE_S = 90.0  # for the harness's clean-up: replicas, PostgreSQL, influxd


def run_bench(argv: Sequence[str], cwd: Path, timeout_s: float
              ) -> subprocess.CompletedProcess[str]:
    """Run `argv`, capturing its output; past `timeout_s` stop it as above and raise
    subprocess.TimeoutExpired with what it printed."""
    with subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout_s, out, err) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
