"""Host hardware errors in the kernel log: machine checks (one per report, not per line), EDAC
CE/UE counts and SXid reports, as records and as the agreed wire schema's Points."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Scope
from collectors.kernel_log import FileFollower, KernelLogCollector, parse_kernel_log
from collectors.kernel_log.fabricmanager import (
    looks_like_fabricmanager_log,
    parse_fabricmanager_log,
)
from collectors.kernel_log.host_points import HostErrorTally, sxid_points
from collectors.kernel_log.sxid_catalog import FATAL_SXIDS, SXID_CATALOG, Category, sxid_info
from collectors.lineprotocol import Point
from tests.collectors.kernel_log.fixtures import (
    DECODE_13_43,
    FABRICMANAGER,
    GPU_MAP,
    IB_FLAP_SYSLOG,
    ISO_48_63_94,
    lines,
)
from tests.collectors.own_captures import DMESG_HOST_ERRORS, read

BOOT = 1_737_000_000.0


def _own() -> list[str]:
    return read(DMESG_HOST_ERRORS).splitlines(keepends=True)


def _ns(uptime: float) -> int:
    return int((BOOT + uptime) * 1e9)


def test_own_capture_records() -> None:
    r = parse_kernel_log(_own(), "n7", gpu_index={"00000000:45:00.0": 1}, boot_time=BOOT)
    assert r.lines == 26 and not r.rejected and not r.notes
    # 26 = 13 ignored (notices of drivers, report detail, thermal lines) + 5 machine-check
    # lines + 3 EDAC reports + 4 SXid lines + 1 Xid
    assert r.ignored == 13
    assert [(m.line, m.cpu, m.bank, m.announced, m.uncorrected) for m in r.mces] == [
        (7, None, None, False, None),
        (9, None, None, False, None),
        (11, None, None, False, None),
        (12, 17, 1, True, False),  # the detail of the notice just before: not counted again
        (15, 4, 6, False, False),  # no notice (rate-limited): the header counts
    ]
    assert [(e.mc, e.kind, e.count, e.line) for e in r.edac] == [
        (0, "CE", 1, 8), (0, "CE", 3, 10), (1, "UE", 1, 19)]
    assert r.edac[0].detail.startswith("memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0")
    assert [(s.code, s.fatal, s.opens_report) for s in r.sxids] == [
        (20034, True, True), (20034, None, False), (20034, None, False), (12028, False, True)]
    assert [(e.key, e.code) for e in r.events] == [("n7:gpu1", 74)]


def test_own_capture_points() -> None:
    r = parse_kernel_log(_own(), "n7", boot_time=BOOT)
    points = HostErrorTally().record_points(r, "n7")
    assert [(p.ts_ns, p.fields) for p in points] == [
        (_ns(8102.113204), {"mce_total": 1, "edac_ce_total": 0, "edac_ue_total": 0}),
        (_ns(8102.113260), {"mce_total": 1, "edac_ce_total": 1, "edac_ue_total": 0}),
        (_ns(8160.500001), {"mce_total": 2, "edac_ce_total": 1, "edac_ue_total": 0}),
        (_ns(8160.500040), {"mce_total": 2, "edac_ce_total": 4, "edac_ue_total": 0}),
        (_ns(9001.000100), {"mce_total": 3, "edac_ce_total": 4, "edac_ue_total": 0}),
        (_ns(9100.250000), {"mce_total": 4, "edac_ce_total": 4, "edac_ue_total": 0}),
        (_ns(9200.0), {"mce_total": 4, "edac_ce_total": 4, "edac_ue_total": 1}),
    ]
    assert all((p.measurement, p.tags) == ("node", {"host": "n7"}) for p in points)
    assert sxid_points(r, "n7") == [
        Point("sxid", {"host": "n7"}, {"code": 20034}, _ns(9300.1)),
        Point("sxid", {"host": "n7"}, {"code": 12028}, _ns(9300.2)),
    ]
    assert [(p.ts_ns, p.fields) for p in HostErrorTally(edac=False).record_points(r, "n7")] == [
        (_ns(8102.113204), {"mce_total": 1}), (_ns(8160.500001), {"mce_total": 2}),
        (_ns(9001.000100), {"mce_total": 3}), (_ns(9100.25), {"mce_total": 4})]


@pytest.mark.parametrize("path", [ISO_48_63_94, DECODE_13_43, IB_FLAP_SYSLOG],
                         ids=lambda p: p.name)
def test_real_logs_have_no_host_errors(path: Path) -> None:
    """The real captures carry no machine-check, EDAC or SXid line: none may be invented, and
    their Xids stay as they were (test_parser.py has the Xid counts)."""
    r = parse_kernel_log(lines(path), "n1", gpu_index=GPU_MAP, boot_time=BOOT, year=2024)
    assert r.mces == [] and r.edac == [] and r.sxids == [] and r.rejected == []
    assert HostErrorTally().record_points(r, "n1") == [] and sxid_points(r, "n1") == []


MCE_SHAPES = """\
[  100.000000] mce: [Hardware Error]: Machine check events logged
[  100.000001] mce: [Hardware Error]: Machine check events logged
[  100.000010] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 7: 8c00004000010090
[  100.000020] mce: [Hardware Error]: CPU 1: Machine Check: 0 Bank 7: 8c00004000010091
[  100.000030] mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 7: 8c00004000010092
[  200.000000] mce: [Hardware Error]: Machine check events logged
[  210.000000] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: 9000004000010005
[  300.000000] [Hardware Error]: CPU 8: Machine Check Exception: 5 Bank 4: b200000000070f0f
[  300.000001] [Hardware Error]: RIP !INEXACT! 10:<ffffffff812e14c1> {intel_idle+0xb1/0x170}
[  300.000002] mce: [Hardware Error]: Machine check: Processor context corrupt
[  300.000003] Kernel panic - not syncing: Fatal machine check
[  400.000000] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0
[  400.000001] {1}[Hardware Error]: event severity: corrected
[  400.000002] [Hardware Error]: Corrected error, no action required.
mce: [Hardware Error]: Machine check events logged
""".splitlines()


def test_machine_checks_are_counted_once_per_report() -> None:
    r = parse_kernel_log(MCE_SHAPES, "n1", boot_time=BOOT)
    counted = [(m.line, m.cpu) for m in r.mces if not m.announced]
    # Two notices claim the first two headers; the third header (no notice left) counts; a
    # notice 10 s before a header is not its own; a pre-4.x exception header counts.
    assert counted == [(1, None), (2, None), (5, 2), (6, None), (7, 3), (8, 8)]
    exc = r.mces[-1]
    assert (exc.exception, exc.uncorrected, exc.status) == (True, True, 0xb200000000070f0f)
    assert r.mces[2].uncorrected is False  # UC clear: a corrected error (e.g. memory via CMCI)
    assert [x.line for x in r.rejected] == [15]  # a counted line without a time stamp
    assert r.rejected[0].metric == "mce_total"
    assert r.ignored == 6  # report detail, the panic line, APEI and AMD decoder lines
    assert HostErrorTally().record_points(r, "n1")[-1].fields["mce_total"] == 6


EDAC_SHAPES = """\
2025-03-02T10:00:00+00:00 EDAC MC0: 1 CE memory read error on DIMM_A1 (page:0x1 grain:32)
2025-03-02T10:00:01+00:00 EDAC MC2: 12 CE Single-bit ECC on unknown memory (node:0 card:0)
2025-03-02T10:00:02+00:00 EDAC MC0: CE page 0x1a2b, offset 0x0, grain 8, syndrome 0x9c, row 2
2025-03-02T10:00:03+00:00 EDAC MC0: UE row 2, channel-a= 0 channel-b= 1 labels "-": i5000 UE
2025-03-02T10:00:04+00:00 EDAC MC1: CE - no information available: e752x CE
2025-03-02T10:00:05+00:00 EDAC amd64 MC3: 2 UE memory read error on DIMM_B2 (page:0x2)
2025-03-02T10:00:06+00:00 EDAC MC0: 99999999999999 CE memory read error on DIMM_A1
2025-03-02T10:00:07+00:00 EDAC MC0: Giving out device to module skx_edac controller Skylake
2025-03-02T10:00:08+00:00 EDAC skx: ECC is disabled on imc 1
EDAC MC0: 1 CE memory read error on DIMM_A1 (no time stamp)
""".splitlines()


def test_edac_reports_of_every_kernel_generation() -> None:
    r = parse_kernel_log(EDAC_SHAPES, "n1")
    assert [(e.mc, e.kind, e.count) for e in r.edac] == [
        (0, "CE", 1), (2, "CE", 12), (0, "CE", 1), (0, "UE", 1), (1, "CE", 1), (3, "UE", 2)]
    assert [(x.line, x.metric) for x in r.rejected] == [(7, "edac_ce_total"),
                                                        (10, "edac_ce_total")]
    assert "out of range" in r.rejected[0].reason
    assert r.ignored == 2  # driver notices
    last = HostErrorTally().record_points(r, "n1")[-1]
    assert last.fields == {"mce_total": 0, "edac_ce_total": 15, "edac_ue_total": 3}
    assert last.ts_ns == int(datetime(2025, 3, 2, 10, 0, 5, tzinfo=UTC).timestamp() * 1e9)


def test_collector_counts_from_its_start(tmp_path: Path) -> None:
    src = _own()
    log = tmp_path / "dmesg.log"
    log.write_text("".join(src[:9]))  # there before we started: never counted
    now = BOOT + 10_000
    c = KernelLogCollector("n7", FileFollower(log), gpu_index={"00000000:45:00.0": 1},
                           boot_time=BOOT, clock=lambda: now, edac_root=tmp_path / "no-edac")
    c.collect()
    assert c.last_host_points == [Point("node", {"host": "n7"}, {
        "mce_total": 0, "edac_ce_total": 0, "edac_ue_total": 0}, int(now * 1e9))]
    with log.open("a") as fh:
        fh.write("".join(src[9:]))
    b = c.collect()
    assert c.status.up and not b.rejected
    assert list(zip(b.events.keys, b.events.values, strict=True))[:1] == [("n7:gpu1", 74.0)]
    node, = (p for p in c.last_host_points if p.measurement == "node")
    assert node.fields == {"mce_total": 2, "edac_ce_total": 3, "edac_ue_total": 1}
    assert [p.fields["code"] for p in c.last_host_points if p.measurement == "sxid"] == [
        20034, 12028]
    c.collect()  # nothing new: the counters hold, no SXid repeats
    assert c.last_host_points == [Point("node", {"host": "n7"}, node.fields, int(now * 1e9))]


def test_collector_leaves_edac_to_sysfs_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "mc").mkdir()
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = KernelLogCollector("n7", FileFollower(log), boot_time=BOOT, clock=lambda: BOOT + 1e4,
                           edac_root=tmp_path / "mc")
    c.collect()  # a log is followed from its end
    log.write_text("".join(_own()))
    c.collect()
    assert [p.fields for p in c.last_host_points if p.measurement == "node"] == [
        {"mce_total": 4}]


def test_collector_batch_carries_the_node_counters_and_sxids(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = KernelLogCollector("n7", FileFollower(log), gpu_index={"00000000:45:00.0": 1},
                           boot_time=BOOT, clock=lambda: BOOT + 1e4,
                           edac_root=tmp_path / "no-edac")
    c.collect()  # a log is followed from its end
    log.write_text("".join(_own()))
    b = c.collect()
    assert not b.rejected
    assert sorted(zip(b.events.keys, b.events.metrics, b.events.values, strict=True)) == [
        ("n7", "sxid", 12028.0), ("n7", "sxid", 20034.0), ("n7:gpu1", "xid", 74.0)]
    frame = b.frames[Scope.NODE]
    assert [e.key for e in frame.entities.entities] == ["n7"] and len(frame.rows) == 1
    cols = {m.name: i for i, m in enumerate(CATALOG.columns(Scope.NODE))}
    got = {k: frame.values[0, cols[k]] for k in ("mce_total", "edac_ce_total", "edac_ue_total")}
    assert got == {"mce_total": 4.0, "edac_ce_total": 4.0, "edac_ue_total": 1.0}


def test_fabric_manager_log_real() -> None:
    src = lines(FABRICMANAGER)
    assert looks_like_fabricmanager_log(src)
    r = parse_fabricmanager_log(src, UTC)
    assert r.entries == 54 and not r.rejected and not r.notes
    [s] = r.sxids
    assert (s.code, s.fatal, s.bus_id, s.line) == (12028, False, "0000:86:00", 100)
    assert s.detail == "physical id 3 port 61"
    assert s.ts == datetime(2025, 2, 27, 15, 10, 2, tzinfo=UTC).timestamp()


def test_fabric_manager_log_shapes() -> None:
    src = [
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 "
        "on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33",
        "[Sep 17 2024 06:01:46] [ERROR] [tid 1230079] failed to find the GPU handle 5410063385"
        "821516767 in the multicast team request setup 6130285411925746235.",
        "[Sep 17 2024 06:01:47] [ERROR] [tid 5] detected NVSwitch fatal error 999999 on fid 0",
        "[Sep 31 2024 06:01:47] [ERROR] [tid 5] detected NVSwitch non-fatal error 12028 on fid 0",
        "Message payload details: detected NVSwitch fatal error 12020 (not an entry of its own)",
    ]
    r = parse_fabricmanager_log(src, UTC)
    assert [(s.code, s.fatal, s.bus_id) for s in r.sxids] == [(20034, True, "0000:86:00")]
    assert [x.line for x in r.rejected] == [3, 4] and len(r.notes) == 1
    assert "multicast team" in r.notes[0]
    assert not looks_like_fabricmanager_log(_own())


def test_sxid_catalog() -> None:
    assert {20034, 12020, 22003, 23001, 24007, 22012, 10003} <= FATAL_SXIDS
    assert not {12028, 11012, 20009, 22013, 10004} & FATAL_SXIDS
    assert all(10000 <= c < 30000 for c in SXID_CATALOG)
    info = sxid_info(12020)
    assert info is not None and info.category is Category.ALWAYS_FATAL
    assert "Restart the host" in info.recovery
    assert all(e.recovery for e in SXID_CATALOG.values() if e.fatal)
    assert sxid_info(1) is None


def test_sxid_catalog_agrees_with_the_chassis_rule() -> None:
    """models/detectors/chassis.py pages on the SXids fatal to the fabric and says nothing of
    those the switch corrects itself; the catalog here is the same guide's data."""
    from models.detectors.chassis import SXID_FATAL, SXID_IGNORED

    always = {c for c, e in SXID_CATALOG.items() if e.category is Category.ALWAYS_FATAL}
    assert always | {10003} == SXID_FATAL
    assert SXID_IGNORED.issubset(c for c, e in SXID_CATALOG.items() if not e.fatal)
    assert not SXID_IGNORED & FATAL_SXIDS


def test_parse_prints_host_errors_beside_xids() -> None:
    # `gpuhealth parse kernel-log` shows what the agent would send from the same log.
    from collectors.registry import get
    from tests.collectors.own_captures import CAPTURES

    got = get("kernel-log").parse(CAPTURES / "kernel-log" / "dmesg-host-errors.log", "n1", 0)
    last = [p for p in got.points if p.measurement == "node"][-1]
    assert last.fields == {"mce_total": 4, "edac_ce_total": 4, "edac_ue_total": 1}
    assert [p.fields["code"] for p in got.points if p.measurement == "sxid"] == [20034, 12028]
