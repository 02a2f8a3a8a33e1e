"""The IB sysfs reader and collector on our own ttar archives (a two-HCA InfiniBand tree; RoCE
ports with and without a usable GID, and an iWARP RNIC): runs in a fresh clone; the real H100
tree and procfs archive under ../shared are the thorough tests."""

from __future__ import annotations

from pathlib import Path

from collectors.catalog import CATALOG, Scope
from collectors.frames import Rejection
from collectors.infiniband import InfinibandCollector, read_sysfs, unpack_ttar
from collectors.schema import SchemaMapper
from tests.collectors.own_captures import IB_ROCE_TTAR, IB_TTAR, IB_TTAR_ROOT, read

TS = 1_700_000_000_000_000_000


def _tree(tmp_path: Path, text: str | None = None,
          refused: list[str] | None = None) -> Path:
    unpack_ttar(read(IB_TTAR) if text is None else text, tmp_path, refused)
    return tmp_path / IB_TTAR_ROOT


def test_tree_values(tmp_path: Path) -> None:
    points = read_sysfs(_tree(tmp_path), "n4", TS)
    by_dev = {p.tags["device"]: p for p in points}
    assert sorted(by_dev) == ["mlx5_2", "mlx5_3"]
    up, down = by_dev["mlx5_2"].fields, by_dev["mlx5_3"].fields
    assert by_dev["mlx5_2"].tags == {"host": "n4", "device": "mlx5_2", "port": "1"}
    assert (up["ib_state"], up["ib_phys_state"], up["ib_rate"]) == (4, 5, 400)
    assert (up["ib_symbol_error"], up["ib_link_downed"], up["ib_port_rcv_errors"]) == (11, 3, 6)
    assert up["ib_port_xmit_data"] == 7299410228761
    assert (down["ib_state"], down["ib_phys_state"], down["ib_rate"]) == (1, 3, 10)
    assert down["ib_link_downed"] == 255
    # Two ConnectX-7 (hca_type MT4129) InfiniBand ports; no GID count on InfiniBand.
    assert {(f["ib_hca_model"], f["ib_link_layer"]) for f in (up, down)} == {(4129, 1)}
    assert "ib_gid_roce_v2" not in up
    assert not SchemaMapper().to_batch(points).rejected


def test_collector_counts_flaps_between_reads(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    c = InfinibandCollector(root, host="n4", clock=lambda: TS)
    first = c.collect()
    assert c.status.up and not first.rejected and len(first.frames[Scope.IB_PORT]) == 2
    port = root / "mlx5_2" / "ports" / "1"
    (port / "counters" / "link_downed").write_text("5\n")  # two flaps, back up
    (port / "counters" / "symbol_error").write_text("40\n")  # errors, no flap
    c.collect()
    assert {k: v for k, v in c.last_flaps.items() if v} == {("mlx5_2", 1): 2}
    assert (("mlx5_3", 1), "link_downed") in c.flaps.saturated  # 255 is the 8-bit ceiling


def test_archive_cut_in_a_counter_keeps_every_whole_file(tmp_path: Path) -> None:
    text = read(IB_TTAR)
    marker = "mlx5_3/ports/1/counters/port_rcv_errors\nLines: 1\n"
    refused: list[str] = []
    root = _tree(tmp_path, text[:text.index(marker) + len(marker)], refused)
    [reason] = refused
    assert "cut short" in reason and "port_rcv_errors" in reason
    points = {p.tags["device"]: p.fields for p in read_sysfs(root, "n4", TS)}
    assert points["mlx5_2"]["ib_symbol_error"] == 11  # the whole first HCA
    assert points["mlx5_3"]["ib_link_downed"] == 255  # and what came before the cut
    assert "ib_port_rcv_errors" not in points["mlx5_3"] and "ib_state" not in points["mlx5_3"]


def test_garbage_in_a_counter_is_refused_and_the_rest_kept(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error").write_text("N/A\n")
    c = InfinibandCollector(root, host="n4", clock=lambda: TS)
    batch = c.collect()
    assert c.status.up
    [r] = batch.rejected
    assert (r.entity, r.metric) == ("n4:mlx5_2:1", "symbol_error")
    assert r.reason == ("mlx5_2/ports/1/counters/symbol_error: counter is not a non-negative "
                        "integer: 'N/A'")
    frame = batch.frames[Scope.IB_PORT]
    col = CATALOG.column(Scope.IB_PORT, "ib_link_downed")
    assert sorted(float(v) for v in frame.values[:, col]) == [3.0, 255.0]


def test_roce_gid_tables(tmp_path: Path) -> None:
    """mlx5_0 has an IP: one usable RoCE v2 GID (the IPv4-mapped one; the link-local v2 does
    not count). mlx5_1 is up with only its link-local pair: 0, the state NCCL cannot connect
    in. The iWARP RNIC has no RoCE GIDs to count, and its model is its PCI device id."""
    unpack_ttar(read(IB_ROCE_TTAR), tmp_path)
    rejected: list[Rejection] = []
    points = read_sysfs(tmp_path / IB_TTAR_ROOT, "n4", TS, rejected)
    assert not rejected
    got = {p.tags["device"]: p.fields for p in points}
    assert (got["mlx5_0"]["ib_gid_roce_v2"], got["mlx5_1"]["ib_gid_roce_v2"]) == (1, 0)
    assert {d: (f["ib_link_layer"], f["ib_hca_model"]) for d, f in got.items()} == {
        "mlx5_0": (2, 4129), "mlx5_1": (2, 4129), "cxgb4_0": (2, 0x6408)}
    assert "ib_gid_roce_v2" not in got["cxgb4_0"]
    assert not SchemaMapper().to_batch(points).rejected


def test_a_gid_gaining_an_address_counts_and_bad_gid_text_is_refused(tmp_path: Path) -> None:
    unpack_ttar(read(IB_ROCE_TTAR), tmp_path)
    port = tmp_path / IB_TTAR_ROOT / "mlx5_1" / "ports" / "1"
    # The netdev got its address back: the kernel adds the v1/v2 pair at free entries.
    (port / "gids" / "4").write_text("0000:0000:0000:0000:0000:ffff:0a00:0312\n")
    (port / "gid_attrs" / "types" / "4").write_text("IB/RoCE v1\n")
    (port / "gids" / "5").write_text("0000:0000:0000:0000:0000:ffff:0a00:0312\n")
    (port / "gid_attrs" / "types" / "5").write_text("RoCE v2\n")
    # A routable GID whose type cannot be read (emptied between the reads) is not counted.
    (port / "gids" / "6").write_text("2001:0db8:0000:0000:0000:0000:0000:0007\n")
    (port / "gids" / "7").write_text("fe80::zz\n")
    rejected: list[Rejection] = []
    got = {p.tags["device"]: p.fields
           for p in read_sysfs(tmp_path / IB_TTAR_ROOT, "n4", TS, rejected)}
    assert got["mlx5_1"]["ib_gid_roce_v2"] == 1
    assert [(r.entity, r.metric, r.reason) for r in rejected] == [
        ("n4:mlx5_1:1", "7", "mlx5_1/ports/1/gids/7: cannot parse GID 'fe80::zz'")]


def test_an_unknown_link_layer_or_hca_type_is_refused_and_the_port_kept(tmp_path: Path) -> None:
    unpack_ttar(read(IB_ROCE_TTAR), tmp_path)
    root = tmp_path / IB_TTAR_ROOT
    (root / "mlx5_0" / "ports" / "1" / "link_layer").write_text("Fibre\n")
    (root / "cxgb4_0" / "device" / "device").write_text("cxgb\n")
    rejected: list[Rejection] = []
    got = {p.tags["device"]: p.fields for p in read_sysfs(root, "n4", TS, rejected)}
    assert [str(r) for r in rejected] == [
        "cxgb4_0/device/device: cannot parse PCI device id 'cxgb' (n4:cxgb4_0:1, device)",
        "mlx5_0/ports/1/link_layer: unknown link layer 'Fibre' (n4:mlx5_0:1, link_layer)"]
    assert "ib_hca_model" not in got["cxgb4_0"] and got["cxgb4_0"]["ib_rate"] == 20
    # Not known to be Ethernet: its GID table is not read.
    assert "ib_link_layer" not in got["mlx5_0"] and "ib_gid_roce_v2" not in got["mlx5_0"]
    assert got["mlx5_0"]["ib_hca_model"] == 4129 and got["mlx5_0"]["ib_state"] == 4
