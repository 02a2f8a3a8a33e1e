"""NvidiaSmiCollector: GPU readings from the nvidia-smi binary.

Each tick runs a narrow `--query-gpu` CSV for the fast-moving gauges (cheap: NVML answers it
without walking every subsystem). Every `xml_interval` seconds it also runs `-q -x` for what
moves slowly but matters most for prediction: ECC counts, retired pages, remapped rows, PCIe
replays and the temperature thresholds. The two are merged into one Batch at one timestamp,
the CSV winning where both report a metric. Both carry each GPU's identity (UUID, serial, bus
id, model, VBIOS, driver) into Batch.identity.

Failures are data: a missing binary or unreadable output give up=False with the reason and an
empty Batch, never an exception. A GPU nvidia-smi cannot read is data too, the `gpu_unreadable`
state of that GPU (collectors.nvidia_smi.states), while the other GPUs' rows are read as usual:
a cell printing an NVML error, a "Unable to determine the device handle for GPU <bus id>" line
(put on the GPU that bus id had), a GPU listed before and missing now, "No devices were found"
(every GPU listed before), and a run that hangs past `timeout` (every GPU listed before: the
tool, not one GPU, stopped answering; up=False as well, since nothing else was read).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence

from collectors.base import CollectorStatus
from collectors.compat import dataclass
from collectors.frames import Batch, Rejection
from collectors.lineprotocol import Point
from collectors.nvidia_smi import states
from collectors.nvidia_smi.csvparse import parse_query_csv
from collectors.nvidia_smi.runner import Runner, run_process
from collectors.nvidia_smi.values import SmiParseError, gpu_point
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
    # The bus id names the GPU of a "Unable to determine the device handle" line on a later
    # tick; the PCIe link fields are as old as the index.
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    # The GPU's identity (collectors.identity) each tick, so a board swapped while the agent
    # runs is seen on its first round: all as old as the index, and cheap (NVML caches them).
    "name",
    "uuid",
    "serial",
    "vbios_version",
    "driver_version",
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
        self._bus_ids: dict[int, str] = {}  # every GPU index listed so far -> its bus id
        self._listed: set[int] = set()  # every GPU index listed so far

    @property
    def known_gpus(self) -> frozenset[int]:
        """The GPU indexes nvidia-smi has listed since the collector started."""
        return frozenset(self._listed)

    def collect(self) -> Batch:
        now = self._clock()
        ts_ns = int(now * 1e9)
        points: list[Point] = []
        rejected: list[Rejection] = []  # readings out of range, refused one by one
        xml_due = self._last_xml is None or now - self._last_xml >= self.xml_interval
        try:
            if xml_due:
                xml = self._run("-q", "-x")
                if xml.timed_out:
                    return self._unreadable(states.TIMEOUT, xml.reason, ts_ns)
                if xml.reason and (states.no_devices(xml.text) or not xml.out.strip()):
                    xml_due = False  # a failed slow read is retried next tick
                else:
                    points += parse_xml(xml.out, self.host, ts_ns, rejected)
            csv = self._run(f"--query-gpu={','.join(self.query_fields)}",
                            "--format=csv,noheader,nounits")
            if csv.timed_out:
                return self._unreadable(states.TIMEOUT, csv.reason, ts_ns)
            if states.no_devices(csv.text) and not self._listed:
                return self._down(f"nvidia-smi lists no GPU: {csv.reason or 'no devices'}")
            handles = states.handle_errors(csv.text)
            bus_ids: dict[int, str] = {}
            rows: list[Point] = []
            if not states.no_devices(csv.text) and (csv.out.strip() or not handles):
                if csv.reason and not csv.out.strip():
                    raise _RunFailed(csv.reason)
                rows = parse_query_csv(csv.out, self.query_fields, self.host, ts_ns, rejected,
                                       bus_ids)
        except (SmiParseError, _RunFailed) as exc:
            return self._down(str(exc))
        if xml_due:
            self._last_xml = now  # only after success, so a failed slow read retries next tick
        points += rows
        self._bus_ids.update(bus_ids)
        listed = {int(p.tags["gpu"]) for p in rows}
        self._listed |= listed
        notes = [csv.reason] if csv.reason else []
        points += self._missing(listed, handles, notes, ts_ns)
        batch = self._mapper.to_batch(points, rejected)
        self.status = CollectorStatus(up=True, reason="; ".join(notes))
        return batch

    def _missing(self, listed: set[int], handles: dict[str, int], notes: list[str],
                 ts_ns: int) -> list[Point]:
        """State points for the GPUs listed before and not now: the state of their handle-error
        line, else not found; and a note for a handle error on a bus id never listed."""
        index_of = {bus: i for i, bus in self._bus_ids.items()}
        found: dict[int, int] = {}
        for bus, state in handles.items():
            i = index_of.get(bus)
            if i is None:
                notes.append(f"GPU at PCI {bus} (never listed) cannot be read")
            elif i not in listed:
                found[i] = state
        for i in self._listed - listed:
            found.setdefault(i, states.NOT_FOUND)
        if found:
            notes.append("unreadable GPU " + ", ".join(f"{i} (state {s})"
                                                       for i, s in sorted(found.items())))
        return [gpu_point(self.host, i, {states.FIELD: s}, ts_ns) for i, s in found.items()]

    def _unreadable(self, state: int, reason: str, ts_ns: int) -> Batch:
        """The tool itself failed (hung): every GPU listed before gets `state`; down."""
        batch = self._mapper.to_batch(
            [gpu_point(self.host, i, {states.FIELD: state}, ts_ns) for i in sorted(self._listed)])
        self._down(reason)
        return batch

    def _run(self, *args: str) -> _Run:
        argv = (self.binary, *args)
        try:
            rc, out, err = self._runner(argv, self.timeout)
        except TimeoutError as exc:
            why = str(exc) or f"{self.binary} timed out after {self.timeout:g} s"
            return _Run("", "", why, timed_out=True)
        except OSError as exc:
            raise _RunFailed(f"cannot run {self.binary}: {exc}") from None
        if rc != 0:
            detail = (err.strip() or out.strip())[:300]
            return _Run(out, err, f"{' '.join(argv)} exited with status {rc}: {detail}")
        return _Run(out, err, "")

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        return Batch()


class _RunFailed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Run:
    """One nvidia-smi run: its stdout and stderr, and why it failed ("" when it did not)."""

    out: str
    err: str
    reason: str
    timed_out: bool = False

    @property
    def text(self) -> str:
        """Both streams, where the per-GPU error lines may be."""
        return f"{self.out}\n{self.err}"
