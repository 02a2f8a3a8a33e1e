"""The EDAC sysfs reader, its collector and source, and rasdaemon's `ras-mc-ctl --summary`, on
our own captures (copies of the sysfs tree: no real one is among ../shared's fixtures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collectors import registry
from collectors.catalog import CATALOG, Scope
from collectors.edac import EdacCollector, parse_summary, read_edac
from collectors.frames import Rejection
from collectors.lineprotocol import Point
from service.commands.cli import main
from tests.collectors.own_captures import EDAC_CSROWS, EDAC_DIMMS, RAS_SUMMARY, read

NS = 1_750_000_000 * 10**9


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "mc"
    shutil.copytree(src, dst)
    return dst


def test_dimm_tree_totals_and_detail() -> None:
    got = read_edac(EDAC_DIMMS)
    assert not got.rejected
    assert got.point("n7", NS) == Point("node", {"host": "n7"},
                                        {"edac_ce_total": 9, "edac_ue_total": 1}, NS)
    mc0, mc1 = got.controllers
    assert (mc0.name, mc0.driver, mc0.ce, mc0.ue, mc0.ce_noinfo, mc0.seconds_since_reset) == (
        "mc0", "Intel_10nm Socket#0 IMC#0", 7, 0, 1, 86031)
    # The kernel counts each error on its DIMM or as noinfo: the controller is their sum.
    for mc in got.controllers:
        assert mc.ce == sum(d.ce or 0 for d in mc.dimms) + (mc.ce_noinfo or 0)
    assert [(d.name, d.label, d.ce, d.ue) for d in mc1.dimms] == [
        ("dimm0", "CPU_SrcID#1_MC#0_Chan#0_DIMM#0", 0, 0),
        ("dimm1", "CPU_SrcID#1_MC#0_Chan#0_DIMM#1", 2, 1)]
    assert got.notes == [
        "mc0/dimm1 'CPU_SrcID#0_MC#0_Chan#1_DIMM#0': 6 corrected, 0 uncorrected",
        "mc1/dimm1 'CPU_SrcID#1_MC#0_Chan#0_DIMM#1': 2 corrected, 1 uncorrected"]


def test_legacy_csrow_tree() -> None:
    got = read_edac(EDAC_CSROWS)
    assert got.totals() == {"edac_ce_total": 5, "edac_ue_total": 0}
    [mc] = got.controllers
    assert [(d.name, d.label, d.ce) for d in mc.dimms] == [
        ("csrow0/ch0", "DIMM_A0", 5), ("csrow0/ch1", "DIMM_B0", 0),
        ("csrow1/ch0", "DIMM_A1", 0), ("csrow1/ch1", "DIMM_B1", 0)]
    assert got.notes == ["mc0/csrow0/ch0 'DIMM_A0': 5 corrected, 0 uncorrected"]


def test_a_bad_controller_count_withholds_that_total(tmp_path: Path) -> None:
    root = _copy(EDAC_DIMMS, tmp_path)
    (root / "mc1" / "ce_count").write_text("garbage\n")
    got = read_edac(root)
    assert got.totals() == {"edac_ce_total": 9, "edac_ue_total": 1} and not got.rejected
    assert "mc1/ce_count is 'garbage', not a count; its DIMMs and noinfo count give the " \
           "total" in got.notes
    (root / "mc1" / "dimm1" / "dimm_ce_count").write_text("x\n")
    got = read_edac(root)
    assert got.totals() == {"edac_ue_total": 1}  # a partial CE sum would look like a reset
    assert got.rejected == [Rejection("mc1/ce_count is 'garbage', not a count",
                                      metric="edac_ce_total")]


def test_a_bad_dimm_count_costs_a_note_only(tmp_path: Path) -> None:
    root = _copy(EDAC_DIMMS, tmp_path)
    (root / "mc0" / "dimm0" / "dimm_ce_count").write_text("-1\n")
    (root / "mc0" / "mc_name").unlink()
    got = read_edac(root)
    assert got.totals() == {"edac_ce_total": 9, "edac_ue_total": 1} and not got.rejected
    assert "mc0/dimm0: dimm_ce_count is '-1', not a count" in got.notes
    assert got.controllers[0].driver == "" and got.controllers[0].dimms[0].ce is None


def test_a_controller_without_its_counts_sums_its_dimms(tmp_path: Path) -> None:
    root = _copy(EDAC_DIMMS, tmp_path)
    for name in ("ce_count", "ue_count"):
        (root / "mc0" / name).unlink()
    assert read_edac(root).totals() == {"edac_ce_total": 9, "edac_ue_total": 1}
    (root / "mc0" / "ce_noinfo_count").unlink()  # then the CE sum is unknown
    assert read_edac(root).totals() == {"edac_ue_total": 1}


def test_collector(tmp_path: Path) -> None:
    root = _copy(EDAC_DIMMS, tmp_path)
    c = EdacCollector("n7", root=root, clock=lambda: NS)
    b = c.collect()
    assert c.status.up and not b.rejected
    frame = b.frames[Scope.NODE]
    cols = {m.name: i for i, m in enumerate(CATALOG.columns(Scope.NODE))}
    assert frame.values[0, cols["edac_ce_total"]] == 9.0
    assert frame.values[0, cols["edac_ue_total"]] == 1.0
    assert "mc1/dimm1" in c.status.reason
    (root / "mc1" / "dimm1" / "dimm_ce_count").write_text("3\n")
    (root / "mc1" / "ce_count").write_text("3\n")
    points, got = c.read()
    assert points[0].fields == {"edac_ce_total": 10, "edac_ue_total": 1}
    assert got.controllers[1].dimms[1].ce == 3


def test_collector_without_edac(tmp_path: Path) -> None:
    c = EdacCollector("n7", root=tmp_path / "absent")
    b = c.collect()
    assert not c.status.up and "no EDAC memory controllers" in c.status.reason
    assert b.samples == 0
    (tmp_path / "absent").mkdir()  # the EDAC core with no memory-controller driver
    assert c.read()[0] == [] and c.status.up and "no memory controller" in c.status.reason


def test_ras_mc_ctl_summary() -> None:
    rejected: list[Rejection] = []
    point, notes = parse_summary(read(RAS_SUMMARY), "n7", NS, rejected)
    assert not rejected
    assert point == Point("node", {"host": "n7"},
                          {"edac_ce_total": 8, "edac_ue_total": 1, "mce_total": 9}, NS)
    assert notes[-1] == ("Uncorrected on 'CPU_SrcID#1_MC#0_Chan#0_DIMM#1' (location 1:0:1:-1)"
                         ": 1")


@pytest.mark.parametrize(("text", "fields", "bad"), [
    ("No Memory errors.\n\nNo PCIe AER errors.\n\nNo MCE errors.\n",
     {"edac_ce_total": 0, "edac_ue_total": 0, "mce_total": 0}, []),
    # rasdaemon built without MCE support prints no MCE block: no mce_total then.
    ("Memory controller events summary:\n\tFatal on DIMM Label(s): 'B2' location: 0:1:1:-1 "
     "errors: 2\n\tInfo on DIMM Label(s): 'B2' location: 0:1:1:-1 errors: 4\n\n",
     {"edac_ce_total": 0, "edac_ue_total": 2}, []),
    ("Memory controller events summary:\n\tCorrected on DIMM Label(s): 'A1' errors: lots\n\n"
     "MCE records summary:\n\t3 Uncorrected, software containable error. errors\n",
     {"mce_total": 3}, [2]),
])
def test_ras_mc_ctl_summary_shapes(text: str, fields: dict[str, int], bad: list[int]) -> None:
    rejected: list[Rejection] = []
    point, _ = parse_summary(text, "n7", NS, rejected)
    assert point is not None and point.fields == fields
    assert [r.line for r in rejected] == bad


def test_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = registry.get("edac")
    assert src.parse(EDAC_CSROWS, "n7", NS).points[0].fields == {"edac_ce_total": 5,
                                                                  "edac_ue_total": 0}
    with pytest.raises(ValueError, match="not an EDAC memory-controller tree"):
        src.parse(tmp_path, "n7", NS)
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    with pytest.raises(ValueError, match="ras-mc-ctl --summary"):
        src.parse(junk, "n7", NS)
    built = src.build("n7", {"root": str(EDAC_DIMMS)})
    assert isinstance(built, EdacCollector) and built.root == EDAC_DIMMS
    assert main(["parse", "edac", str(EDAC_DIMMS), str(RAS_SUMMARY), "--host", "n7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [x.rsplit(" ", 1)[0] for x in out] == [
        "node,host=n7 edac_ce_total=9i,edac_ue_total=1i",
        "node,host=n7 edac_ce_total=8i,edac_ue_total=1i,mce_total=9i"]
