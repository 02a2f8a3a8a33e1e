"""IbstatCollector: IB port state, physical state and rate from the `ibstat` tool, each collect().

The fallback for hosts where /sys/class/infiniband is not readable. It reports what the sysfs
collector reports of a port's state (ib_state, ib_rate, and ib_link_flaps from state changes
between reads: ibstat has no link_downed counter), under the same `ib_port` entities, so rules
and dashboards do not care which of the two ran. The tool runs through an injected runner with a
timeout, like nvidia-smi: a missing binary, a timeout, a non-zero exit with nothing read, or
output with no CA gives up=False and the reason.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from collectors.base import CollectorStatus
from collectors.frames import Batch
from collectors.infiniband.flaps import FlapTracker
from collectors.infiniband.ibstat import parse_ibstat
from collectors.infiniband.sysfs import to_point
from collectors.nvidia_smi.runner import Runner, run_process
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)


class IbstatCollector:
    def __init__(
        self,
        *,
        binary: str = "ibstat",
        host: str | None = None,
        timeout: float = 5.0,
        runner: Runner = run_process,
        clock: Callable[[], int] = time.time_ns,
        name: str = "ibstat",
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.binary = binary
        self.host = host if host is not None else socket.gethostname()
        self.timeout = timeout
        self.name = name
        self.status = CollectorStatus()
        self.flaps = FlapTracker()
        self._runner = runner
        self._clock = clock
        self._mapper = SchemaMapper()

    def collect(self) -> Batch:
        ts_ns = self._clock()
        try:
            rc, out, err = self._runner((self.binary,), self.timeout)
        except TimeoutError as exc:
            return self._down(str(exc) or f"{self.binary} timed out after {self.timeout:g} s")
        except OSError as exc:
            return self._down(f"cannot run {self.binary}: {exc}")
        result = parse_ibstat(out, self.host)
        if not result.ports:
            detail = (err.strip() or out.strip())[:300] or "no output"
            why = f"exited with status {rc}" if rc else "found no InfiniBand port"
            return self._down(f"{self.binary} {why}: {detail}")
        # ibstat exits non-zero after an ibpanic on a later device; the ports read before it
        # are good, the panic is among the rejections.
        self.flaps.update(result.ports)
        points = [p for p in (to_point(r, self.host, ts_ns) for r in result.ports) if p.fields]
        for p in points:
            p.fields["ib_link_flaps"] = self.flaps.total.get(
                (p.tags["device"], int(p.tags["port"])), 0)
        self.status = CollectorStatus(up=True)
        return self._mapper.to_batch(points, result.rejected)

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        return Batch()
