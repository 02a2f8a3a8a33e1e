"""The registry of sources (a collectors.plugins.Registry): for each, how to read a captured
output (for `gpuhealth parse`), whether this host has it, and how to build its collector from its
own config section. A name is registered once; a duplicate is refused.

A parse gives the points it read, what it refused and why, and notes an operator should see (a
GPU without NVLink, an Xid put on a GPU the bus map lacks). Output in which it recognises
nothing of its source raises ValueError saying what it expected."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from collectors.base import Collector
from collectors.compat import dataclass
from collectors.frames import Entity, Rejection
from collectors.lineprotocol import Point
from collectors.plugins import Registry


@dataclass(slots=True)
class Parsed:
    points: list[Point] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Parse = Callable[[Path, str, int], Parsed]  # (captured output, host, ts_ns)


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    description: str
    parse: Parse
    detect: Callable[[], bool]
    build: Callable[[str, Mapping[str, Any]], Collector]  # (host, config section)


SOURCES: Registry[Source] = Registry("source")


def register(source: Source) -> Source:
    return SOURCES.register(source)


def get(name: str) -> Source:
    """KeyError naming the known sources when none is called `name`."""
    return SOURCES[name]


# ---- nvidia-smi ---------------------------------------------------------------------------------

def _smi_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """Any captured nvidia-smi output, told apart by its content: `-q -x` XML, `nvlink
    --status`, a `--query-gpu` CSV with its header (of any width), or `-q` text."""
    from collectors.nvidia_smi import (
        looks_like_nvlink_status,
        parse_nvlink_status,
        parse_query_csv_with_header,
        parse_text,
        parse_xml,
    )

    text = path.read_text(errors="replace")
    out = Parsed()
    head = text.lstrip()[:400]
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        out.points = parse_xml(text, host, ts_ns, out.rejected)
    elif looks_like_nvlink_status(text):
        out.points = parse_nvlink_status(text, host, ts_ns, notes=out.notes,
                                         rejected=out.rejected)
    elif _is_csv(text):
        out.points = parse_query_csv_with_header(text, host, ts_ns, out.rejected)
    else:
        out.points = parse_text(text, host, ts_ns, out.rejected)
    return out


def _is_csv(text: str) -> bool:
    """A --query-gpu capture: comma-separated first line (whole: the wide ones run to
    thousands of characters), which -q text ("==============NVSMI LOG==") never has."""
    first = next((x for x in text.splitlines() if x.strip()), "")
    return "," in first and not first.lstrip().startswith("=")


def _smi_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.nvidia_smi import NvidiaSmiCollector

    return NvidiaSmiCollector(host=host, **dict(cfg))


register(Source("nvidia-smi", "nvidia-smi: --query-gpu each round, -q -x each minute",
                _smi_parse, lambda: shutil.which("nvidia-smi") is not None, _smi_build))


# ---- dcgm-exporter ------------------------------------------------------------------------------

def _dcgm_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    from collectors.dcgm import ParseStats, parse_exposition

    st = ParseStats()
    refused: list[Rejection] = []
    points = parse_exposition(path.read_text(errors="replace"), host, ts_ns, stats=st,
                              rejected=refused)
    if not st.samples:
        raise ValueError("no DCGM_FI_* sample in the page")
    # Skips are mostly by design (a MIG instance's utilization, NVLink totals); say them all.
    return Parsed(points, rejected=refused,
                  notes=[f"{n} sample(s) skipped: {why}" for why, n in st.skipped.items()])


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


def _ib_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """A sysfs tree (a copied /sys/class/infiniband) or a `.ttar` text archive of one."""
    from collectors.infiniband import read_sysfs, unpack_ttar

    out = Parsed()
    if path.is_dir():
        out.points = read_sysfs(path, host, ts_ns, out.rejected)
        return out
    with tempfile.TemporaryDirectory() as tmp:
        cut: list[str] = []
        unpack_ttar(path.read_bytes(), Path(tmp), cut)
        out.rejected += [Rejection(why) for why in cut]
        roots = sorted({p.parent.parent for p in Path(tmp).rglob("ports") if p.is_dir()})
        if not roots:
            raise ValueError(f"no <device>/ports/ tree inside{' (' + cut[0] + ')' if cut else ''}")
        for root in roots:
            out.points += read_sysfs(root, host, ts_ns, out.rejected)
    return out


def _ib_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.infiniband import InfinibandCollector

    settings = dict(cfg)
    if "root" in settings:  # from YAML or the environment it arrives as a string
        settings["root"] = Path(settings["root"])
    return InfinibandCollector(host=host, **settings)


register(Source("infiniband", "InfiniBand port counters and state from sysfs", _ib_parse,
                lambda: IB_ROOT.is_dir() and any(IB_ROOT.iterdir()), _ib_build))


# ---- InfiniBand through ibstat ------------------------------------------------------------

def _ibstat_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """`ibstat` output: port state, physical state and rate of every CA's ports."""
    from collectors.infiniband import parse_ibstat, to_point

    res = parse_ibstat(path.read_text(errors="replace"), host)
    if not res.cas:
        why = f" ({res.rejected[0].reason})" if res.rejected else ""
        raise ValueError(f"no \"CA '<name>'\" line: not ibstat output{why}")
    if not res.ports and not res.rejected:
        return Parsed(notes=[f"{res.cas} CA(s) and no port"])
    points = [p for p in (to_point(r, host, ts_ns) for r in res.ports) if p.fields]
    return Parsed(points, res.rejected)


def _ibstat_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.infiniband import IbstatCollector

    return IbstatCollector(host=host, **dict(cfg))


def _ibstat_detect() -> bool:
    # Only where the sysfs tree cannot be read; SUPERSEDED prefers sysfs where both are.
    return shutil.which("ibstat") is not None


register(Source("ibstat", "InfiniBand port state and rate from the ibstat tool, for hosts "
                          "where sysfs cannot be read", _ibstat_parse, _ibstat_detect,
                _ibstat_build))


# ---- kernel log (Xid) -------------------------------------------------------------------------

def _kernel_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """Xid events (and host errors: `node` counters, SXid events) of a dmesg, journalctl or
    syslog capture, coalesced. The capture carries no bus map, so each GPU gets
    busmap.unmapped_index() of its PCI bus id (a note names it)."""
    from collectors.kernel_log import parse_kernel_log
    from collectors.kernel_log.host_points import HostErrorTally, sxid_points
    from collectors.kernel_log.timestamps import Stamped, TimeContext, split_stamp

    lines = path.read_text(errors="replace").splitlines()
    res = parse_kernel_log(lines, host, boot_time=ts_ns / 1e9)
    if not res.events and not res.rejected and not res.sxids:
        ctx = TimeContext(boot_time=ts_ns / 1e9)
        if not any(isinstance(split_stamp(x, ctx), Stamped) for x in lines):
            raise ValueError(f"none of its {len(lines)} lines is a kernel-log line (no dmesg, "
                             "dmesg -T, ISO, syslog or /dev/kmsg time stamp)")
        res.notes.append(f"no Xid line among {len(lines)} kernel-log lines")
    points = [Point("xid", {"host": host, "gpu": Entity.parse(e.key).unit}, {"code": e.code},
                    int(e.ts * 1e9)) for e in res.events]
    # Host hardware errors in the same log: machine checks and EDAC counts, NVSwitch SXids.
    points += HostErrorTally().record_points(res, host) + sxid_points(res, host)
    return Parsed(points, res.rejected, res.notes)


def gpu_bus_map(binary: str = "nvidia-smi", timeout_s: float = 5.0) -> dict[str, int]:
    """PCI bus id -> GPU index as nvidia-smi numbers them, so kernel-log Xids land on the same
    GPU entity as every other source; empty when nvidia-smi is absent or fails. A GPU in a bad
    state ("[Unknown Error]" for its bus id) is left out, and the others kept."""
    from collectors.nvidia_smi import run_process
    from collectors.nvidia_smi.bus_ids import read_bus_map

    try:
        _, stdout, _ = run_process(
            [binary, "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], timeout_s)
    except (OSError, TimeoutError):
        return {}
    return read_bus_map(stdout)


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

def _nvml_parse(path: Path, host: str, ts_ns: int) -> Parsed:
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


# NVML reads everything nvidia-smi prints, without a process per round; sysfs gives the IB
# counters as well as what ibstat gives.
SUPERSEDED = {"nvidia-smi": "nvml", "ibstat": "infiniband"}


def detected() -> list[str]:
    """The sources this host has, less those another detected source covers."""
    found = [s.name for s in SOURCES.values() if s.detect()]
    return [n for n in found if SUPERSEDED.get(n) not in found]


# ---- IPMI BMC (ipmitool) ------------------------------------------------------------------

def _ipmi_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """A captured `ipmitool sdr elist` or freeipmi `ipmi-sensors` CSV (supplies, fans,
    inlet/exhaust, redundancy), or `ipmitool sel elist` or `ipmi-sel -v` CSV (every warning or
    critical entry becomes a `sel` event: a capture has no earlier read to be new against)."""
    from collectors.ipmi import (
        looks_like_sdr_elist,
        looks_like_sel,
        looks_like_sel_csv,
        looks_like_sensors_csv,
        map_rows,
        parse_sdr_elist,
        parse_sel_csv,
        parse_sel_elist,
        parse_sensors_csv,
    )

    text = path.read_text(errors="replace")
    out = Parsed()
    if looks_like_sdr_elist(text) or looks_like_sensors_csv(text):
        listing = parse_sensors_csv(text, out.rejected) if looks_like_sensors_csv(text) \
            else None
        rows = listing.rows if listing else parse_sdr_elist(text, out.rejected)
        got = map_rows(rows, host, ts_ns, listing.lower_critical if listing else None)
        out.points, out.notes = got.points, [str(r) for r in got.skipped]
    elif looks_like_sel(text) or looks_like_sel_csv(text):
        entries = (parse_sel_csv(text, out.rejected) if looks_like_sel_csv(text)
                   else parse_sel_elist(text, out.rejected))
        out.points = [Point("sel", {"host": host}, {"code": e.severity}, ts_ns)
                      for e in entries if e.severity]
        out.notes = [f"{len(entries) - len(out.points)} SEL entr(ies) informational or "
                     "deasserted"]
    else:
        raise ValueError("neither `ipmitool sdr elist` rows (name | NNh | status | entity | "
                         "reading), `ipmitool sel elist` records, nor freeipmi `ipmi-sensors` "
                         "/ `ipmi-sel -v` CSV with its header")
    return out


def _ipmi_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    """Settings: `bmc` (absent: in band through /dev/ipmi0), `user`, `port`, `interface`
    (lanplus), `cipher`, and the password from `password_file` or the environment variable
    `password_env` (default IPMI_PASSWORD), never from the settings themselves; `timeout` (s,
    per read, default 60), `thresholds_every`, `sel`, `binary`; `tool` (ipmitool, the default,
    or freeipmi) and `workarounds` (freeipmi -W flags, comma-separated)."""
    from collectors.ipmi import IpmiCollector, Target

    settings = dict(cfg)
    if "password" in settings:
        raise ValueError("ipmi: put the BMC password in a file (password_file) or an "
                         "environment variable (password_env), not in the settings")
    target_keys = ("bmc", "user", "port", "interface", "cipher", "password_env", "binary",
                   "tool")
    target = {k: settings.pop(k) for k in target_keys if k in settings}
    for k in ("port", "cipher"):
        if k in target:
            target[k] = int(target[k])
    if "password_file" in settings:
        target["password_file"] = Path(settings.pop("password_file"))
    if "workarounds" in settings:
        flags = settings.pop("workarounds")
        target["workarounds"] = tuple(
            w.strip() for w in (flags.split(",") if isinstance(flags, str) else flags)
            if w.strip())
    for k, conv in (("timeout", float), ("thresholds_every", int)):
        if k in settings:
            settings[k] = conv(settings[k])
    if isinstance(settings.get("sel"), str):
        settings["sel"] = settings["sel"].lower() in ("1", "true", "yes", "on")
    return IpmiCollector(Target(**target), host=host, **settings)


def _ipmi_detect() -> bool:
    # In band only: a BMC device node and the tool; LAN BMCs are configured, not detected.
    return shutil.which("ipmitool") is not None and any(
        Path(p).exists() for p in ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0"))


register(Source("ipmi", "BMC power supplies, fans, inlet/exhaust temperature, redundancy and new "
                        "SEL entries through ipmitool, in band or over the LAN (lanplus)",
                _ipmi_parse, _ipmi_detect, _ipmi_build))

# ---- Redfish BMC -------------------------------------------------------------------------------

def _redfish_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """A Redfish mockup tree (`<path under /redfish/v1>/index.json`, as the DMTF publishes
    them) or one saved resource (Power, Thermal, Fan, PowerSupply, a log's Entries...). SEL
    entries of a capture are all reported (no earlier read to compare with)."""
    import json

    from collectors.redfish import read_resource, read_tree

    if path.is_dir():
        if not (path / "index.json").is_file():
            raise ValueError("no index.json at the top: not a Redfish mockup tree")
        points, skips = read_tree(path, host, ts_ns)
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            raise ValueError("not JSON: expected a Redfish resource or a mockup tree") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object: expected a Redfish resource")
        points, skips = read_resource(data, host, ts_ns)
    return Parsed(points, skips.rejected, skips.notes)


def _redfish_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.redfish import RedfishCollector

    return RedfishCollector.from_config(host, cfg)


# Never detected: reading a BMC needs its address and credentials, which only settings give.
register(Source("redfish", "BMC power supplies, fans, temperatures and event log over Redfish: "
                           "a central poller of many BMCs, or a node's own BMC in band",
                _redfish_parse, lambda: False, _redfish_build))
# ---- PCIe link health (sysfs) ----------------------------------------------------------------

def _pcie_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """A copied PCI devices directory (/sys/bus/pci/devices): each NVIDIA GPU's link and AER;
    or a captured `lspci -D -nn -vv`: each NVIDIA GPU's link."""
    from collectors.pcie import PcieCollector

    if path.is_dir():
        points, rejected = PcieCollector(host=host, root=path).read(ts_ns)
        return Parsed(points, rejected)
    text = path.read_text(errors="replace")
    if "LnkSta:" not in text and "<access denied>" not in text:
        raise ValueError("neither a copy of /sys/bus/pci/devices nor `lspci -D -nn -vv` output")

    def captured(argv: object, timeout: float, env: object) -> tuple[int, str, str]:
        return 0, text, ""

    points, rejected = PcieCollector(host=host, source="lspci", runner=captured).read(ts_ns)
    return Parsed(points, rejected)


def _pcie_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.pcie import PCI_ROOT, PcieCollector

    settings = dict(cfg)  # source: sysfs (default) or lspci; lspci: its path; timeout (s)
    settings["root"] = Path(settings.get("root", PCI_ROOT))
    if "timeout" in settings:
        settings["timeout"] = float(settings["timeout"])
    if "gpu_index" not in settings and shutil.which("nvidia-smi"):
        settings["gpu_index"] = gpu_bus_map()
        settings["refresh_index"] = gpu_bus_map
    return PcieCollector(host=host, **settings)


def _pcie_detect() -> bool:
    from collectors.pcie import PCI_ROOT, gpu_devices

    try:
        return PCI_ROOT.is_dir() and bool(gpu_devices(PCI_ROOT))
    except OSError:
        return False


register(Source("pcie", "each GPU's PCIe link width, speed and AER counters from sysfs (or the "
                        "link from `lspci -vv` where sysfs is not readable)",
                _pcie_parse, _pcie_detect, _pcie_build))


# ---- EDAC host memory errors (sysfs) ----------------------------------------------------------

def _edac_parse(path: Path, host: str, ts_ns: int) -> Parsed:
    """A copied EDAC tree (/sys/devices/system/edac/mc) or a `ras-mc-ctl --summary` output:
    the node's corrected / uncorrected memory error totals (and rasdaemon's machine checks); a
    note names each DIMM with errors."""
    from collectors.edac import looks_like_summary, parse_summary, read_edac

    if path.is_dir():
        got = read_edac(path)
        if not got.controllers:
            raise ValueError("no mc<N>/ directory: not an EDAC memory-controller tree")
        point = got.point(host, ts_ns)
        return Parsed([point] if point else [], got.rejected, got.notes)
    text = path.read_text(errors="replace")
    if not looks_like_summary(text):
        raise ValueError("neither an EDAC tree (mc<N>/ce_count) nor `ras-mc-ctl --summary` "
                         "output ('Memory controller events summary:' / 'No Memory errors.')")
    out = Parsed()
    point, out.notes = parse_summary(text, host, ts_ns, out.rejected)
    out.points = [point] if point else []
    return out


def _edac_build(host: str, cfg: Mapping[str, Any]) -> Collector:
    from collectors.edac import EDAC_ROOT, EdacCollector

    settings = dict(cfg)
    settings["root"] = Path(settings.get("root", EDAC_ROOT))
    return EdacCollector(host, **settings)


def _edac_detect() -> bool:
    from collectors.edac import EDAC_ROOT

    return EDAC_ROOT.is_dir()


register(Source("edac", "host memory corrected / uncorrected error totals from the EDAC driver "
                        "in sysfs", _edac_parse, _edac_detect, _edac_build))
