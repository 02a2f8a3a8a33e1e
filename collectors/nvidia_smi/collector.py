"""NvidiaSmiCollector: GPU readings from the nvidia-smi binary.

Each tick runs a narrow `--query-gpu` CSV for the fast-moving gauges (cheap: NVML answers it
without walking every subsystem). Every `xml_interval` seconds it also runs `-q -x` for what
moves slowly but matters most for prediction: ECC counts, retired pages, remapped rows, PCIe
replays and the temperature thresholds. The two are merged into one Batch at one timestamp,
the CSV winning where both report a metric.

Failures are data: a timeout, a non-zero exit, a missing binary or unreadable output give
up=False with the reason and an empty Batch, never an exception.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence

from collectors.base import CollectorStatus
from collectors.frames import Batch, Rejection
from collectors.lineprotocol import Point
from collectors.nvidia_smi.csvparse import parse_query_csv
from collectors.nvidia_smi.runner import Runner, run_process
from collectors.nvidia_smi.values import SmiParseError
from collectors.nvidia_smi.xmlparse import parse_xml
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

# Fields every driver since the 400 series accepts; an unknown field fails the whole query,
# so newer ones (temperature.gpu.tlimit) are opt-in through `query_fields`.
DEFAULT_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "clocks.current.sm",
    "utilization.gpu",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_power_cap",
    "clocks_throttle_reasons.hw_slowdown",
)


class NvidiaSmiCollector:
    def __init__(
        self,
        *,
        binary: str = "nvidia-smi",
        host: str | None = None,
        timeout: float = 5.0,
        xml_interval: float = 60.0,
        query_fields: Sequence[str] = DEFAULT_QUERY_FIELDS,
        runner: Runner = run_process,
        clock: Callable[[], float] = time.time,
        name: str = "nvidia_smi",
    ) -> None:
        if timeout <= 0 or xml_interval < 0:
            raise ValueError("timeout must be positive and xml_interval not negative")
        self.name = name
        self.status = CollectorStatus()
        self.binary = binary
        self.host = host or socket.gethostname()
        self.timeout = timeout
        self.xml_interval = xml_interval
        self.query_fields = tuple(query_fields)
        self._runner = runner
        self._clock = clock
        self._mapper = SchemaMapper()  # one per collector: one EntityTable per topology
        self._last_xml: float | None = None

    def collect(self) -> Batch:
        now = self._clock()
        ts_ns = int(now * 1e9)
        points: list[Point] = []
        rejected: list[Rejection] = []  # readings out of range, refused one by one
        try:
            xml_due = self._last_xml is None or now - self._last_xml >= self.xml_interval
            if xml_due:
                points += parse_xml(self._run("-q", "-x"), self.host, ts_ns, rejected)
            csv = self._run(f"--query-gpu={','.join(self.query_fields)}",
                            "--format=csv,noheader,nounits")
            points += parse_query_csv(csv, self.query_fields, self.host, ts_ns, rejected)
        except (SmiParseError, _RunFailed) as exc:
            return self._down(str(exc))
        if xml_due:
            self._last_xml = now  # only after success, so a failed slow read retries next tick
        batch = self._mapper.to_batch(points, rejected)
        self.status = CollectorStatus(up=True)
        return batch

    def _run(self, *args: str) -> str:
        argv = (self.binary, *args)
        try:
            rc, out, err = self._runner(argv, self.timeout)
        except TimeoutError as exc:
            raise _RunFailed(str(exc) or f"{self.binary} timed out after {self.timeout:g} s"
                             ) from None
        except OSError as exc:
            raise _RunFailed(f"cannot run {self.binary}: {exc}") from None
        if rc != 0:
            detail = (err.strip() or out.strip())[:300]
            raise _RunFailed(f"{' '.join(argv)} exited with status {rc}: {detail}")
        return out

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        return Batch()


class _RunFailed(Exception):
    pass
