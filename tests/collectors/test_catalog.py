"""The metric catalog checked against real captured tool outputs.

The fixtures are real outputs of nvidia-smi, dcgm-exporter and InfiniBand sysfs that live in the
shared checkout next to the repository (../shared/fixtures from the repo root). They are read in
place, never copied into the repo; without them the source-spelling tests skip.
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath

import pytest

from collectors.catalog import CATALOG, Catalog, Kind, Metric, Scope
from service.commands import docs as docs_gen

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"

needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(),
    reason="real tool captures not found at ../shared/fixtures (relative to the repo root)",
)


def _with(attr: str) -> list[Metric]:
    return [m for m in CATALOG if getattr(m, attr) is not None]


def _ids(metrics: list[Metric]) -> list[str]:
    return [m.name for m in metrics]


# ---- nvidia-smi --query-gpu ------------------------------------------------------------------

# A field line of `--help-query-gpu` is one or more quoted names joined by "or".
_HELP_FIELD_LINE = re.compile(r'^"[^"]+"(?:\s+or\s+"[^"]+")*\s*$')

# Fields that the older --help-query-gpu list (nvidia_gpu_exporter-fields.txt) predates. Each
# must really be absent from that list and present in a newer driver's --help-query-gpu capture,
# so this list cannot hide a typo.
NEWER_QUERY_FIELDS = frozenset({"temperature.gpu.tlimit"})


def _help_fields(text: str) -> set[str]:
    return {
        name
        for line in text.splitlines()
        if _HELP_FIELD_LINE.match(line)
        for name in re.findall(r'"([^"]+)"', line)
    }


@functools.cache
def _fields_txt() -> frozenset[str]:
    path = FIXTURES / "nvidia-smi-csv" / "nvidia_gpu_exporter-fields.txt"
    return frozenset(_help_fields(path.read_text(encoding="utf-8")))


@functools.cache
def _newer_help_fields() -> frozenset[str]:
    """Fields from the `--help-query-gpu` sections of the capture bundles (drivers 590-595)."""
    fields: set[str] = set()
    for path in sorted((FIXTURES / "nvidia-smi-text").glob("nvidia_gpu_exporter-capture-*.txt")):
        sections = path.read_text(encoding="utf-8").split("\n# $ ")
        for section in sections:
            if section.startswith("nvidia-smi --help-query-gpu"):
                fields |= _help_fields(section)
    return frozenset(fields)


@needs_fixtures
def test_help_query_gpu_lists_parse() -> None:
    # Guards the parser: an empty set would make every field check below vacuous.
    assert len(_fields_txt()) > 100
    assert "temperature.gpu" in _fields_txt()
    assert len(_newer_help_fields()) > len(_fields_txt())


@needs_fixtures
@pytest.mark.parametrize("metric", _with("smi_query"), ids=_ids(_with("smi_query")))
def test_query_gpu_field_is_listed(metric: Metric) -> None:
    field = metric.smi_query
    assert field is not None
    if field in NEWER_QUERY_FIELDS:
        assert field not in _fields_txt(), f"{field} is in fields.txt: drop it from the newer list"
        assert field in _newer_help_fields()
    else:
        assert field in _fields_txt(), f"{metric.name}: {field!r} is not a --query-gpu field"


def test_newer_query_fields_are_used() -> None:
    assert {m.smi_query for m in CATALOG} >= NEWER_QUERY_FIELDS


# ---- nvidia-smi -q -x ------------------------------------------------------------------------

_DTD = re.compile(r"nvsmi_device_v(\d+)\.dtd")


@functools.cache
def _xml_gpus() -> dict[str, list[ET.Element]]:
    """<gpu> elements of the v12 and v13 captures, by file name."""
    gpus: dict[str, list[ET.Element]] = {}
    for path in sorted((FIXTURES / "nvidia-smi-xml").glob("*.xml")):
        text = path.read_text(encoding="utf-8")
        version = _DTD.search(text)
        if version is not None and int(version[1]) in (12, 13):
            gpus[path.name] = ET.fromstring(text).findall("gpu")
    return gpus


@needs_fixtures
def test_xml_captures_cover_v12_and_v13() -> None:
    names = _xml_gpus()
    assert any("v12" in n for n in names) and any("v13" in n for n in names), sorted(names)
    assert all(names.values()), "a capture without a <gpu> element"


@needs_fixtures
@pytest.mark.parametrize("metric", _with("smi_xml"), ids=_ids(_with("smi_xml")))
def test_xml_path_resolves(metric: Metric) -> None:
    path = metric.smi_xml
    assert path is not None
    hits = [
        (name, len(el) == 0)
        for name, gpus in _xml_gpus().items()
        for gpu in gpus
        if (el := gpu.find(path)) is not None
    ]
    assert any(leaf for _, leaf in hits), f"{metric.name}: <gpu>/{path} is in no v12/v13 capture"
    # The path must name the value, never a section: a section such as <remapped_rows> is a bare
    # "N/A" on GPUs without the feature, so only the captures where it has children expose it.
    sections = [name for name, leaf in hits if not leaf]
    assert not sections, f"{metric.name}: <gpu>/{path} is a section in {sections}"


# ---- DCGM / dcgm-exporter ----------------------------------------------------------------------

# Fields our catalog uses that dcgm-exporter does not ship in its CSVs. Per anchors-systems.md
# section 4 (dcgm-exporter `etc/default-counters.csv`, ids from DCGM `dcgm_fields.h`): the
# temperature thresholds and the T.Limit margin are "not in the CSV", the throttle bitmask is
# "not in the CSV (Moneo uses it)", and ROW_REMAP_PENDING is "not in the CSV". A collector reads
# them from DCGM directly. Each must really be absent from the CSVs (checked below).
NOT_IN_EXPORTER_CSV = frozenset({
    "DCGM_FI_DEV_MEM_MAX_OP_TEMP",
    "DCGM_FI_DEV_GPU_TEMP_LIMIT",
    "DCGM_FI_DEV_SLOWDOWN_TEMP",
    "DCGM_FI_DEV_SHUTDOWN_TEMP",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    # PCIe link width and generation: in dcgm_fields.h (235-238) and dcgm-exporter reads them when
    # a counters CSV lists them, but none of the shipped CSVs does.
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
    "DCGM_FI_DEV_PCIE_LINK_GEN",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH",
})

# Field ids from DCGM's dcgm_fields.h as section 4 quotes them; SM_CLOCK (100) and GPU_UTIL (203)
# are not in that table and come from dcgm_fields.h itself.
DCGM_IDS: dict[str, int] = {
    "DCGM_FI_DEV_SM_CLOCK": 100,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 112,
    "DCGM_FI_DEV_MEMORY_TEMP": 140,
    "DCGM_FI_DEV_GPU_TEMP": 150,
    "DCGM_FI_DEV_MEM_MAX_OP_TEMP": 151,
    "DCGM_FI_DEV_GPU_TEMP_LIMIT": 153,
    "DCGM_FI_DEV_POWER_USAGE": 155,
    "DCGM_FI_DEV_SLOWDOWN_TEMP": 158,
    "DCGM_FI_DEV_SHUTDOWN_TEMP": 159,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 202,
    "DCGM_FI_DEV_GPU_UTIL": 203,
    "DCGM_FI_DEV_XID_ERRORS": 230,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 235,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 236,
    "DCGM_FI_DEV_PCIE_LINK_GEN": 237,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": 238,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 310,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 311,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 312,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 313,
    "DCGM_FI_DEV_RETIRED_SBE": 390,
    "DCGM_FI_DEV_RETIRED_DBE": 391,
    "DCGM_FI_DEV_RETIRED_PENDING": 392,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 393,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 394,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 395,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 396,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 409,
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 419,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 429,
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 439,
}
# Lane 0 ids of the per-link NVLink fields (section 4: "CRC flit 400-405, CRC data 410-415,
# replay 420-425, recovery 430-435").
NVLINK_LANE0_IDS: dict[str, int] = {
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT": 400,
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT": 410,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT": 420,
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT": 430,
}

_DCGM_SPEC = re.compile(
    r"^(?P<name>DCGM_FI_[A-Z0-9_]+?)(?P<lane>_L<n>)? \((?P<ids>[^)]*)\)(?: & 0x[0-9a-fA-F]+)?$"
)
_LANE_IDS = re.compile(r"^(\d+)-(\d+); total (\d+)$")


@functools.cache
def _exporter_csv_fields() -> frozenset[str]:
    # Commented-out rows count: dcgm-exporter ships those fields, disabled by default.
    fields: set[str] = set()
    for path in (FIXTURES / "dcgm-exporter").glob("*.csv"):
        for line in path.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().lstrip("#").split(",")]
            if len(cells) >= 3 and re.fullmatch(r"DCGM_FI_[A-Z0-9_]+", cells[0]):
                fields.add(cells[0])
    return frozenset(fields)


def _exporter_name(metric: Metric) -> str:
    """The name dcgm-exporter would ship: per-link NVLink fields ship as their _TOTAL."""
    m = _DCGM_SPEC.match(metric.dcgm or "")
    assert m is not None, f"{metric.name}: unparsable DCGM spelling {metric.dcgm!r}"
    return m["name"] + "_TOTAL" if m["lane"] else m["name"]


@needs_fixtures
@pytest.mark.parametrize("metric", _with("dcgm"), ids=_ids(_with("dcgm")))
def test_dcgm_field_is_shipped_or_known(metric: Metric) -> None:
    name = _exporter_name(metric)
    assert name in _exporter_csv_fields() or name in NOT_IN_EXPORTER_CSV, (
        f"{metric.name}: {name} is neither in the dcgm-exporter CSVs nor a known DCGM-only field"
    )


@needs_fixtures
def test_dcgm_only_fields_are_really_absent_from_exporter() -> None:
    assert len(_exporter_csv_fields()) > 20
    shipped = NOT_IN_EXPORTER_CSV & _exporter_csv_fields()
    assert not shipped, f"now shipped by dcgm-exporter, check them against the CSVs: {shipped}"
    assert {_exporter_name(m) for m in _with("dcgm")} >= NOT_IN_EXPORTER_CSV


@pytest.mark.parametrize("metric", _with("dcgm"), ids=_ids(_with("dcgm")))
def test_dcgm_field_ids(metric: Metric) -> None:
    m = _DCGM_SPEC.match(metric.dcgm or "")
    assert m is not None, f"{metric.name}: unparsable DCGM spelling {metric.dcgm!r}"
    if m["lane"]:
        lanes = _LANE_IDS.match(m["ids"])
        assert lanes is not None, m["ids"]
        first, last, total = (int(g) for g in lanes.groups())
        lane0 = NVLINK_LANE0_IDS[m["name"]]
        assert (first, last, total) == (lane0, lane0 + 5, DCGM_IDS[m["name"] + "_TOTAL"]), m["ids"]
    else:
        assert int(m["ids"]) == DCGM_IDS[m["name"]], f"{metric.name}: {metric.dcgm}"


# ---- InfiniBand sysfs ----------------------------------------------------------------------------

_IB_ROOT = "sys/class/infiniband/"
_PORT = re.compile(r"^(?P<dev>[^/]+)/ports/(?P<port>\d+)/(?P<rel>.+)$")


def _ttar_files(text: str) -> dict[str, str]:
    """Regular files of a ttar archive. A file is a 'Path:' (or 'File:') header followed by
    'Lines: n' and n content lines; reading by count keeps content lines out of the headers."""
    files: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        header = lines[i]
        i += 1
        if not header.startswith(("Path: ", "File: ")):
            continue
        if i < len(lines) and lines[i].startswith("Lines: "):
            count = int(lines[i].split(":", 1)[1])
            files[header.split(": ", 1)[1]] = "\n".join(lines[i + 1 : i + 1 + count])
            i += 1 + count
    return files


@functools.cache
def _ib_ports() -> dict[str, dict[str, str]]:
    """{"tree:dev/port": {path relative to the port directory: content}} for both fixtures."""
    ports: dict[str, dict[str, str]] = {}

    def add(tree: str, rel_to_class: str, content: str) -> None:
        m = _PORT.match(rel_to_class)
        if m is not None:
            key = f"{tree}:{m['dev']}/{m['port']}"
            ports.setdefault(key, {})[m["rel"]] = content.strip()

    base = FIXTURES / "infiniband-sysfs"
    plain = base / "gpud-sys-class-infiniband-h100.0"
    for path in sorted(plain.rglob("*")):
        if path.is_file():
            add(plain.name, path.relative_to(plain).as_posix(), path.read_text(encoding="utf-8"))
    for ttar in sorted(base.glob("*.ttar")):
        for name, content in _ttar_files(ttar.read_text(encoding="utf-8")).items():
            if _IB_ROOT in name:
                add(ttar.name, name.split(_IB_ROOT, 1)[1], content)
    return ports


def _ports_with_counters() -> dict[str, dict[str, str]]:
    return {k: v for k, v in _ib_ports().items() if any(p.startswith("counters/") for p in v)}


# The port's own files; the HCA's PCI link ("../../device/...") sits outside the port and the
# fixture trees were copied without the device link (tests/collectors/infiniband reads it). A
# count over a table ("gids/<i> + ...", RoCE ports only: the fixtures have no GID tables) is
# no one file either; tests/collectors/infiniband reads it from our own RoCE capture.
_IB = [m for m in CATALOG if m.scope is Scope.IB_PORT and m.sysfs is not None
       and not m.sysfs.startswith("../") and "<" not in m.sysfs]


@needs_fixtures
def test_ib_fixtures_hold_both_trees() -> None:
    trees = {key.split(":")[0] for key in _ports_with_counters()}
    assert trees == {"gpud-sys-class-infiniband-h100.0", "procfs-fixtures.ttar"}


@needs_fixtures
@pytest.mark.parametrize("metric", _IB, ids=_ids(_IB))
def test_ib_sysfs_path_exists_on_every_port(metric: Metric) -> None:
    assert metric.sysfs is not None
    missing = [key for key, files in _ports_with_counters().items() if metric.sysfs not in files]
    assert not missing, f"{metric.name}: {metric.sysfs} missing on {missing}"


@needs_fixtures
def test_ib_sysfs_values_match_catalog_units() -> None:
    counters = [m.sysfs for m in _IB if m.kind is Kind.COUNTER]
    states = re.findall(r"(\d) ([A-Z]+)", CATALOG["ib_state"].description)
    assert CATALOG["ib_rate"].unit == "Gbit/s"
    for key, files in _ports_with_counters().items():
        for path in counters:
            assert path is not None and files[path].isdigit(), (key, path, files.get(path or ""))
        # "4: ACTIVE": the number is the value stored, with the meaning the catalog documents.
        number, _, name = files["state"].partition(": ")
        assert (number, name) in states, (key, files["state"])
        # "400 Gb/sec (4X NDR)": the leading number is in the catalog's unit.
        assert re.match(r"^\d+(\.\d+)? Gb/sec\b", files["rate"]), (key, files["rate"])


@pytest.mark.parametrize("metric", _IB, ids=_ids(_IB))
def test_ib_telegraf_field_is_the_counter_file_name(metric: Metric) -> None:
    # Telegraf's infiniband input emits every file of the port's counters/ directory as a field
    # named after the file, and nothing else (no state or rate).
    assert metric.sysfs is not None
    path = PurePosixPath(metric.sysfs)
    if path.parent == PurePosixPath("counters"):
        assert metric.telegraf == f"infiniband.{path.name}", metric.telegraf
    else:
        assert metric.telegraf is None, metric.telegraf


# ---- registry ------------------------------------------------------------------------------------


def _m(name: str, kind: Kind = Kind.GAUGE, *, resets: bool = False,
       derived: bool = False) -> Metric:
    return Metric(name, "1", kind, Scope.GPU, name, resets=resets, derived=derived,
                  valid=None if kind in (Kind.COUNTER, Kind.EVENT) else (0.0, 1.0))


def test_registry_refuses_duplicates() -> None:
    cat = Catalog()
    cat.register(_m("a"))
    with pytest.raises(ValueError, match="already registered"):
        cat.register(_m("a", Kind.COUNTER))
    assert len(cat) == 1 and cat["a"].kind is Kind.GAUGE


def test_catalog_names_are_unique() -> None:
    names = [m.name for m in CATALOG]
    assert len(names) == len(set(names)) == len(CATALOG)


def test_only_counters_reset() -> None:
    with pytest.raises(ValueError, match="only counters"):
        Catalog().register(_m("g", resets=True))
    assert all(m.kind is Kind.COUNTER for m in CATALOG if m.resets)


def test_columns_exclude_derived_and_events() -> None:
    cat = Catalog()
    cat.register(_m("g"))
    cat.register(_m("d", derived=True))
    cat.register(_m("e", Kind.EVENT))
    assert [m.name for m in cat.columns(Scope.GPU)] == ["g"]
    assert [m.name for m in cat.events(Scope.GPU)] == ["e"]
    with pytest.raises(KeyError):
        cat.column(Scope.GPU, "d")
    cat.register(_m("s", Kind.STATE))  # registering invalidates the cached columns
    assert [m.name for m in cat.columns(Scope.GPU)] == ["g", "s"]


@pytest.mark.parametrize("scope", list(Scope))
def test_catalog_columns_per_scope(scope: Scope) -> None:
    expected = [
        m for m in CATALOG if m.scope is scope and not m.derived and m.kind is not Kind.EVENT
    ]
    assert list(CATALOG.columns(scope)) == expected
    for i, m in enumerate(expected):
        assert CATALOG.column(scope, m.name) == i


def test_xid_is_an_event_and_ber_is_derived() -> None:
    assert "xid" not in {m.name for m in CATALOG.columns(Scope.GPU)}
    assert "xid" in {m.name for m in CATALOG.events(Scope.GPU)}
    assert "ib_ber" not in {m.name for m in CATALOG.columns(Scope.IB_PORT)}


# ---- the metrics the issue requires --------------------------------------------------------------

_G, _C, _E, _S = Kind.GAUGE, Kind.COUNTER, Kind.EVENT, Kind.STATE
# (name, scope, kind, resets): resets only matters for counters (volatile ones reset, persistent
# ones never decrease).
REQUIRED: list[tuple[str, Scope, Kind, bool]] = [
    ("gpu_temp", Scope.GPU, _G, False),
    ("mem_temp", Scope.GPU, _G, False),
    ("gpu_slowdown_temp", Scope.GPU, _G, False),
    ("gpu_shutdown_temp", Scope.GPU, _G, False),
    ("gpu_temp_margin", Scope.GPU, _G, False),
    ("power_draw", Scope.GPU, _G, False),
    ("sm_clock", Scope.GPU, _G, False),
    ("gpu_util", Scope.GPU, _G, False),
    ("ecc_sbe_volatile", Scope.GPU, _C, True),
    ("ecc_dbe_volatile", Scope.GPU, _C, True),
    ("ecc_sbe_aggregate", Scope.GPU, _C, False),
    ("ecc_dbe_aggregate", Scope.GPU, _C, False),
    ("retired_pages_sbe", Scope.GPU, _C, False),
    ("retired_pages_dbe", Scope.GPU, _C, False),
    ("retired_pages_pending", Scope.GPU, _S, False),
    ("remapped_rows_correctable", Scope.GPU, _C, False),
    ("remapped_rows_uncorrectable", Scope.GPU, _C, False),
    ("remapped_rows_pending", Scope.GPU, _S, False),
    ("remapped_rows_failure", Scope.GPU, _S, False),
    ("nvlink_crc_flit", Scope.NVLINK, _C, True),
    ("nvlink_crc_data", Scope.NVLINK, _C, True),
    ("nvlink_replay", Scope.NVLINK, _C, True),
    ("nvlink_recovery", Scope.NVLINK, _C, True),
    ("nvlink_state", Scope.NVLINK, _S, False),
    ("xid", Scope.GPU, _E, False),
    ("pcie_replay", Scope.GPU, _C, True),
    ("throttle_thermal", Scope.GPU, _S, False),
    ("throttle_power", Scope.GPU, _S, False),
    ("throttle_hw_slowdown", Scope.GPU, _S, False),
    ("ib_symbol_error", Scope.IB_PORT, _C, True),
    ("ib_link_error_recovery", Scope.IB_PORT, _C, True),
    ("ib_link_downed", Scope.IB_PORT, _C, True),
    ("ib_port_rcv_errors", Scope.IB_PORT, _C, True),
    ("ib_local_link_integrity_errors", Scope.IB_PORT, _C, True),
    ("ib_excessive_buffer_overrun_errors", Scope.IB_PORT, _C, True),
    ("ib_port_rcv_data", Scope.IB_PORT, _C, True),
    ("ib_port_xmit_data", Scope.IB_PORT, _C, True),
    ("ib_state", Scope.IB_PORT, _S, False),
    ("ib_rate", Scope.IB_PORT, _G, False),
    ("ib_ber", Scope.IB_PORT, _G, False),
]


@pytest.mark.parametrize(
    ("name", "scope", "kind", "resets"), REQUIRED, ids=[r[0] for r in REQUIRED]
)
def test_required_metric(name: str, scope: Scope, kind: Kind, resets: bool) -> None:
    assert name in CATALOG
    metric = CATALOG[name]
    assert (metric.scope, metric.kind, metric.resets) == (scope, kind, resets)
    # Only the BER is computed; every other required metric has a source that reports it.
    assert metric.derived is (name == "ib_ber")
    sources = (metric.dcgm, metric.nvml, metric.smi_xml, metric.smi_query, metric.telegraf,
               metric.sysfs)
    assert any(sources) is not metric.derived


# ---- docs/metrics.md -----------------------------------------------------------------------------


def test_metrics_md_is_up_to_date() -> None:
    path = REPO / "docs" / "metrics.md"
    assert path.is_file(), "docs/metrics.md is missing: run `python -m service.commands.docs`"
    assert path.read_text(encoding="utf-8") == docs_gen.render_metrics_md(), (
        "docs/metrics.md is stale: run `python -m service.commands.docs`"
    )


def test_metrics_md_lists_every_metric_once() -> None:
    text = docs_gen.render_metrics_md()
    for m in CATALOG:
        assert text.count(f"| `{m.name}` |") == 1, m.name


def test_docs_gen_check_flags_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "metrics.md"
    assert docs_gen.main(["--check", "--output", str(out)]) == 1  # missing
    assert docs_gen.main(["--output", str(out)]) == 0
    assert docs_gen.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    assert docs_gen.main(["--check", "--output", str(out)]) == 1
