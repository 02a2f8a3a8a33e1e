"""Every writer into one real InfluxDB database: each source's line output (nvidia-smi XML,
`--query-gpu` CSV and `-q` text, dcgm-exporter, InfiniBand sysfs, the kernel log), an agent's
round, the simulator's trace and the service's InfluxDB sink. InfluxDB keeps one type per field
and refuses a point that changes it ("field type conflict"), so every write must be answered 204
and every field must read back with the catalog's type.

Own small captures in each source's real shape run everywhere; the real captures under
../shared/fixtures are added when that checkout is present. All points share one week, so they
land in one shard, where InfluxDB checks the types.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from collectors import registry
from collectors.catalog import CATALOG, EVENT_FIELD, FieldType, Kind, Scope
from collectors.frames import Batch
from collectors.kernel_log import parse_kernel_log
from collectors.lineprotocol import Point
from collectors.lineprotocol_format import format_points
from collectors.schema import SchemaMapper, batch_to_lines
from models.simulator.scenarios import load_scenario
from models.simulator.simulator import Simulator
from service.history.influx.lines import RATE_SUFFIX, LineWriter
from service.stages.ingest import EventLog, Ingestor
from service.stages.windows import WindowStore
from tests.influx.server import InfluxServer

T0 = 1_699_999_200
NS = 10**9
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"

XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
\t<timestamp>Tue Nov 14 21:20:00 2023</timestamp>
\t<driver_version>550.54.15</driver_version>
\t<attached_gpus>1</attached_gpus>
\t<gpu id="00000000:19:00.0">
\t\t<product_name>NVIDIA H100 80GB HBM3</product_name>
\t\t<minor_number>0</minor_number>
\t\t<pci><replay_counter>2</replay_counter></pci>
\t\t<ecc_errors>
\t\t\t<volatile>
\t\t\t\t<sram_correctable>0</sram_correctable>
\t\t\t\t<dram_correctable>7</dram_correctable>
\t\t\t\t<dram_uncorrectable>0</dram_uncorrectable>
\t\t\t</volatile>
\t\t\t<aggregate>
\t\t\t\t<sram_correctable>1</sram_correctable>
\t\t\t\t<dram_correctable>12</dram_correctable>
\t\t\t\t<dram_uncorrectable>0</dram_uncorrectable>
\t\t\t</aggregate>
\t\t</ecc_errors>
\t\t<remapped_rows>
\t\t\t<remapped_row_corr>1</remapped_row_corr>
\t\t\t<remapped_row_unc>0</remapped_row_unc>
\t\t\t<remapped_row_pending>No</remapped_row_pending>
\t\t\t<remapped_row_failure>No</remapped_row_failure>
\t\t</remapped_rows>
\t\t<temperature>
\t\t\t<gpu_temp>41 C</gpu_temp>
\t\t\t<gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>
\t\t\t<gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>
\t\t\t<memory_temp>49 C</memory_temp>
\t\t</temperature>
\t\t<gpu_power_readings><power_draw>112.34 W</power_draw></gpu_power_readings>
\t\t<clocks><sm_clock>1980 MHz</sm_clock></clocks>
\t\t<utilization><gpu_util>12 %</gpu_util></utilization>
\t</gpu>
</nvidia_smi_log>
"""
CSV = ("index, temperature.gpu, ecc.errors.corrected.volatile.total, power.draw [W], "
       "clocks_throttle_reasons.hw_thermal_slowdown\n0, 41, 7, 112.34 W, Not Active\n")
TEXT = """
==============NVSMI LOG==============

Timestamp                                 : Tue Nov 14 21:20:00 2023
Driver Version                            : 535.183.01

Attached GPUs                             : 1
GPU 00000000:19:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Minor Number                          : 0
    PCI
        Bus Id                            : 00000000:19:00.0
        Replays Since Reset               : 3
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            DRAM Correctable              : 5
            DRAM Uncorrectable            : 0
        Aggregate
            DRAM Correctable              : 9
            DRAM Uncorrectable            : 0
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No
    Temperature
        GPU Current Temp                  : 40 C
        GPU Shutdown Temp                 : 92 C
        GPU Slowdown Temp                 : 89 C
        Memory Current Temp               : 48 C
    GPU Power Readings
        Power Draw                        : 110.50 W
"""
_LABELS = 'gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
DCGM = "".join(f"# TYPE {name} {kind}\n{name}{{{_LABELS}}} {value}\n" for name, kind, value in (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "41"), ("DCGM_FI_DEV_POWER_USAGE", "gauge", "112.5"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "7"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "2"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "0"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "64"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0", "counter", "0")))
KERNEL = "[  812.443311] NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus.\n"


def _ib_tree(root: Path) -> Path:
    port = root / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    for c in ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
              "local_link_integrity_errors", "excessive_buffer_overrun_errors",
              "port_rcv_data", "port_xmit_data"):
        (port / "counters" / c).write_text("3\n")
    return root


def _captures(tmp: Path) -> list[tuple[str, Path]]:
    """(source, file) for our own captures, then the shared real ones that exist."""
    own = {"a.xml": XML, "q.csv": CSV, "q.txt": TEXT, "page.txt": DCGM}
    for name, text in own.items():
        (tmp / name).write_text(text)
    out = [("nvidia-smi", tmp / "a.xml"), ("nvidia-smi", tmp / "q.csv"),
           ("nvidia-smi", tmp / "q.txt"), ("dcgm-exporter", tmp / "page.txt"),
           ("infiniband", _ib_tree(tmp / "ib"))]
    if SHARED.is_dir():
        out += [("nvidia-smi", p) for p in sorted((SHARED / "nvidia-smi-xml").glob("*.xml"))]
        out += [("nvidia-smi", p) for p in sorted((SHARED / "nvidia-smi-text").glob(
            "gpud-nvidia-smi-query.*.valid*"))]
        out += [("infiniband", p) for p in sorted((SHARED / "infiniband-sysfs").iterdir())]
    return out


def _dcgm_pages() -> list[str]:
    if not SHARED.is_dir():
        return []
    from tests.collectors.dcgm.pages import exposition

    return [exposition(p) for p in sorted((SHARED / "dcgm-exporter").glob("*.md"))]


def _kernel_points() -> list[Point]:
    logs = [KERNEL.splitlines(keepends=True)]
    iso = SHARED / "xid-logs" / "gpud-dmesg-time-format-iso-xid48-63-94.log"
    if iso.is_file():
        logs.append(iso.read_text().splitlines(keepends=True))
    out = []
    for lines in logs:
        res = parse_kernel_log(lines, "n1", gpu_index={"00000000:19:00.0": 0},
                               boot_time=T0 - 900.0)
        out += [Point("xid", {"host": "n1", "gpu": str(e.gpu)}, {EVENT_FIELD: e.code},
                      T0 * NS + i) for i, e in enumerate(res.events)]
    return out


def _simulated(n: int = 3) -> list[Batch]:
    cfg = load_scenario("ci")
    cfg = cfg.model_copy(update={"fleet": cfg.fleet.model_copy(update={"nodes": 2}),
                                 "time": cfg.time.model_copy(update={"days": 0.01})})
    out = []
    for batch in Simulator(cfg).run():
        for f in batch.frames.values():  # into the week of the other points
            f.ts = f.ts - f.ts.min() + T0 + 5 * len(out)
        batch.events.ts = [T0 + 5.0 * len(out)] * len(batch.events)
        out.append(batch)
        if len(out) == n:
            break
    return out


def _write(srv: InfluxServer, db: str, what: str, lines: list[str]) -> None:
    assert lines, f"{what}: nothing to write"
    r = httpx.post(f"{srv.url}/write", params={"db": db},
                   content="\n".join(lines).encode(), timeout=60)
    assert r.status_code == 204, f"{what}: {r.status_code} {r.text}"


def _field_types(srv: InfluxServer, db: str) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for s in srv.query("SHOW FIELD KEYS", db):
        name = str(s["name"])
        values = s["values"]
        assert isinstance(values, list)
        for field, ftype in values:
            out.setdefault(name, {}).setdefault(str(field), []).append(str(ftype))
    return out


@pytest.mark.slow
def test_every_writer_gives_each_field_the_catalog_type(influx_server: InfluxServer,
                                                        tmp_path: Path) -> None:
    srv, db = influx_server, "fieldtypes"
    srv.query(f'CREATE DATABASE "{db}"')
    ts_ns = T0 * NS
    mapper = SchemaMapper(strict=False)
    everything: list[str] = []
    # Each source as `gpuhealth parse` prints it (Points through lineprotocol_format)...
    for i, (source, path) in enumerate(_captures(tmp_path)):
        parsed = registry.get(source).parse(path, f"n{i % 3}", ts_ns + i)
        lines = list(format_points(parsed.points))
        _write(srv, db, f"{source} {path.name}", lines)
        everything += lines
    for i, page in enumerate(_dcgm_pages()):
        (tmp_path / f"dcgm{i}.txt").write_text(page)
        lines = list(format_points(registry.get("dcgm-exporter").parse(
            tmp_path / f"dcgm{i}.txt", "n2", ts_ns + 100 + i).points))
        _write(srv, db, f"dcgm page {i}", lines)
        everything += lines
    kernel = list(format_points(_kernel_points()))
    _write(srv, db, "kernel log", kernel)
    everything += kernel
    # ... the same rounds as an agent pushes them (mapped to a batch, then batch_to_lines) ...
    batch = mapper.parse("\n".join(everything))
    assert not batch.rejected, batch.rejected[:3]
    agent = list(batch_to_lines(batch))
    _write(srv, db, "agent round", agent)
    # ... the simulator's trace lines ...
    sim = _simulated()
    _write(srv, db, "simulator", [line for b in sim for line in batch_to_lines(b)])
    # ... and the service's sink: samples, rates, derived values and events as ingested.
    ingest = Ingestor(WindowStore(), EventLog())
    sink = LineWriter("c1")
    for b in [batch, *sim]:
        res = ingest.ingest(b, T0 + 3600.0)
        _write(srv, db, "service sink", list(sink.batch(res.clean, res.rates, res.derived)))

    types = _field_types(srv, db)
    seen = 0
    for scope in Scope:
        stored = types.get(scope.value, {})
        for m in CATALOG:
            if m.scope is not scope or m.kind is Kind.EVENT or m.name not in stored:
                continue
            assert stored[m.name] == [str(m.field_type)], (scope, m.name, stored[m.name])
            seen += 1
        for name, kinds in types.get(scope.value + RATE_SUFFIX, {}).items():
            assert kinds == [str(FieldType.FLOAT)], (scope, name, kinds)
    assert types["xid"] == {EVENT_FIELD: [str(FieldType.INTEGER)]}
    # Every source together covers the catalog's GPU, NVLink and IB metrics broadly.
    assert seen >= 30, types
    # Read back whole: no field refuses its values.
    for measurement in types:
        assert srv.query(f'SELECT * FROM "{measurement}" LIMIT 5', db)


def test_numbers_a_writer_cannot_type_are_left_out_not_written_as_floats() -> None:
    batch = SchemaMapper().parse(f"gpu,host=n1,gpu=0 gpu_temp=40,ecc_sbe_volatile=3i {T0 * NS}")
    frame = batch.frames[Scope.GPU]
    frame.values[0, CATALOG.column(Scope.GPU, "ecc_sbe_volatile")] = 2.0**64  # no `i` form
    frame.values[0, CATALOG.column(Scope.GPU, "gpu_temp")] = np.float64(41)
    [line] = LineWriter("c1").frame(frame)
    assert line == f"gpu,cluster=c1,gpu=0,host=n1 gpu_temp=41.0 {T0 * NS}"
