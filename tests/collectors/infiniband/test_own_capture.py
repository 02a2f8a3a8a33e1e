"""The IB sysfs reader and collector on our own ttar archive of a two-HCA tree: runs in a fresh
clone; the real H100 tree and procfs archive under ../shared are the thorough tests."""

from __future__ import annotations

from pathlib import Path

from collectors.catalog import CATALOG, Scope
from collectors.infiniband import InfinibandCollector, read_sysfs, unpack_ttar
from collectors.schema import SchemaMapper
from tests.collectors.own_captures import IB_TTAR, IB_TTAR_ROOT, read

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
