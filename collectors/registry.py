"""The explicit registry of sources: for each, how to read a captured output (for
`gpuhealth parse`), whether this host has it, and how to build its collector from its own
config section. A name is registered once; a duplicate is refused."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.base import Collector
from collectors.lineprotocol import Point

Parse = Callable[[Path, str, int], list[Point]]  # (captured output, host, ts_ns) -> points


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    description: str
    parse: Parse
    detect: Callable[[], bool]
    build: Callable[[str, Mapping[str, Any]], Collector]  # (host, config section)


SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    if source.name in SOURCES:
        raise ValueError(f"source {source.name!r} is already registered")
    SOURCES[source.name] = source
    return source


def get(name: str) -> Source:
    try:
        return SOURCES[name]
    except KeyError:
        known = ", ".join(sorted(SOURCES)) or "none"
        raise KeyError(f"unknown source {name!r} (known: {known})") from None


# ---- nvidia-smi ---------------------------------------------------------------------------------

def _smi_parse(path: Path, host: str, ts_ns: int) -> list[Point]:
    """Any captured nvidia-smi output, told apart by its content: `-q -x` XML, `nvlink
    --status`, a `--query-gpu` CSV with its header, or `-q` text."""
    from collectors.nvidia_smi import parse_nvlink_status, parse_query_csv, parse_text, parse_xml

    text = path.read_text(errors="replace")
    head = text.lstrip()[:400]
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        return parse_xml(text, host, ts_ns)
    if "Link 0:" in text or "NVLink information" in text:
        return parse_nvlink_status(text, host, ts_ns)
    first = head.splitlines()[0] if head else ""
    if "," in first and not first.startswith("="):
        fields = [f.strip().split(" [")[0] for f in first.split(",")]
        return parse_query_csv(text, fields, host, ts_ns)
    return parse_text(text, host, ts_ns)


def _smi_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.nvidia_smi import NvidiaSmiCollector

    return NvidiaSmiCollector(host=host, **dict(cfg))


register(Source("nvidia-smi", "nvidia-smi: --query-gpu each round, -q -x each minute",
                _smi_parse, lambda: shutil.which("nvidia-smi") is not None, _smi_build))


# ---- dcgm-exporter ------------------------------------------------------------------------------

def _dcgm_parse(path: Path, host: str, ts_ns: int) -> list[Point]:
    from collectors.dcgm import parse_exposition

    return parse_exposition(path.read_text(errors="replace"), host, ts_ns)


def _dcgm_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.dcgm import DcgmExporterCollector

    settings = {"url": "http://127.0.0.1:9400/metrics", **dict(cfg)}
    return DcgmExporterCollector(host=host, **settings)


def _dcgm_detect() -> bool:
    import httpx

    try:
        return httpx.get("http://127.0.0.1:9400/metrics", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


register(Source("dcgm-exporter", "dcgm-exporter's Prometheus page (default :9400/metrics)",
                _dcgm_parse, _dcgm_detect, _dcgm_build))


# ---- InfiniBand ----------------------------------------------------------------------------

IB_ROOT = Path("/sys/class/infiniband")


def _ib_parse(path: Path, host: str, ts_ns: int) -> list[Point]:
    """A sysfs tree (a copied /sys/class/infiniband) or a `.ttar` text archive of one."""
    from collectors.infiniband import read_sysfs, unpack_ttar

    if path.is_dir():
        return read_sysfs(path, host, ts_ns)
    with tempfile.TemporaryDirectory() as tmp:
        unpack_ttar(path.read_bytes(), Path(tmp))
        roots = sorted({p.parent.parent for p in Path(tmp).rglob("ports") if p.is_dir()})
        if not roots:
            raise ValueError(f"{path}: no <device>/ports/ tree inside")
        return [pt for root in roots for pt in read_sysfs(root, host, ts_ns)]


def _ib_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.infiniband import InfinibandCollector

    settings = dict(cfg)
    if "root" in settings:  # from YAML or the environment it arrives as a string
        settings["root"] = Path(settings["root"])
    return InfinibandCollector(host=host, **settings)


register(Source("infiniband", "InfiniBand port counters and state from sysfs", _ib_parse,
                lambda: IB_ROOT.is_dir() and any(IB_ROOT.iterdir()), _ib_build))


# ---- kernel log (Xid) -------------------------------------------------------------------------

def _kernel_parse(path: Path, host: str, ts_ns: int) -> list[Point]:
    """Xid events of a dmesg, journalctl or syslog capture, coalesced; a GPU whose PCI bus id
    the capture does not map to an index keeps the bus id as its label."""
    from collectors.kernel_log import parse_kernel_log

    res = parse_kernel_log(path.read_text(errors="replace").splitlines(), host,
                           boot_time=ts_ns / 1e9)
    return [Point("xid", {"host": host, "gpu": str(e.gpu if e.gpu is not None else e.bus_id)},
                  {"code": e.code}, int(e.ts * 1e9)) for e in res.events]


def gpu_bus_map(binary: str = "nvidia-smi", timeout_s: float = 5.0) -> dict[str, int]:
    """PCI bus id -> GPU index as nvidia-smi numbers them, so kernel-log Xids land on the same
    GPU entity as every other source; empty when nvidia-smi is absent or fails."""
    from collectors.nvidia_smi import run_process

    try:
        rc, stdout, _ = run_process(
            [binary, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], timeout_s)
    except (OSError, TimeoutError):
        return {}
    if rc != 0:
        return {}
    out: dict[str, int] = {}
    for line in stdout.splitlines():
        index, _, bus = (x.strip() for x in line.partition(","))
        if index.isdigit() and bus:
            out[bus] = int(index)
    return out


def _kernel_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.kernel_log import KernelLogCollector

    settings = dict(cfg)
    if "gpu_index" not in settings and shutil.which("nvidia-smi"):
        settings["gpu_index"] = gpu_bus_map()
        settings["refresh_index"] = gpu_bus_map
    path = settings.pop("path", None)
    if path:
        return KernelLogCollector.from_file(host, Path(path), **settings)
    if Path("/dev/kmsg").exists():
        return KernelLogCollector.from_kmsg(host, **settings)
    return KernelLogCollector.from_journal(host, **settings)


register(Source("kernel-log", "Xid and SXid lines from /dev/kmsg, journalctl -k or a log file",
                _kernel_parse,
                lambda: Path("/dev/kmsg").exists() or shutil.which("journalctl") is not None,
                _kernel_build))


# ---- NVML ----------------------------------------------------------------------------------

def _nvml_parse(path: Path, host: str, ts_ns: int) -> list[Point]:
    raise ValueError("NVML reads a live driver; capture nvidia-smi output and parse that instead")


def _nvml_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.nvml import NvmlCollector

    return NvmlCollector(host, **dict(cfg))


def _nvml_detect() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: this host has no NVML
        return False
    return True


register(Source("nvml", "NVML through nvidia-ml-py: every GPU metric, NVLink per link, Xid events",
                _nvml_parse, _nvml_detect, _nvml_build))


# NVML reads everything nvidia-smi prints, without a process per round.
SUPERSEDED = {"nvidia-smi": "nvml"}


def detected() -> list[str]:
    """The sources this host has, less those another detected source covers."""
    found = [s.name for s in SOURCES.values() if s.detect()]
    return [n for n in found if SUPERSEDED.get(n) not in found]
