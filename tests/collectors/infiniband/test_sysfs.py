"""read_sysfs / read_ports over real captured trees: an H100 node (8x ConnectX-7 NDR plus a
BlueField-3 bond) and the procfs ttar (Omni-Path hfi1, mlx4 QDR, mlx5 EDR)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.frames import Rejection
from collectors.infiniband import read_ports, read_sysfs, unpack_ttar
from collectors.schema import SchemaMapper
from tests.collectors.infiniband.trees import H100, TTAR, TTAR_ROOT, needs_h100, needs_ttar

TS = 1_700_000_000_000_000_000


@needs_h100
def test_h100_tree() -> None:
    rejected: list[Rejection] = []
    points = read_sysfs(H100, "gpu-node-1", TS, rejected)
    assert not rejected
    by_dev = {p.tags["device"]: p for p in points}
    assert sorted(by_dev) == [*(f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)), "mlx5_bond_0"]
    for dev, p in by_dev.items():
        assert p.measurement == "ib_port" and p.ts_ns == TS
        assert p.tags == {"host": "gpu-node-1", "device": dev, "port": "1"}
        assert p.fields["ib_state"] == 4
        assert p.fields["ib_symbol_error"] == 0
        assert p.fields["ib_port_rcv_errors"] == 14
        assert p.fields["ib_rate"] == (200 if dev == "mlx5_bond_0" else 400)
        assert p.fields["ib_link_downed"] == (255 if dev == "mlx5_1" else 0)
    assert by_dev["mlx5_0"].fields["ib_port_rcv_data"] == 230539874932483
    assert by_dev["mlx5_1"].fields["ib_port_rcv_data"] == 205128687774249
    # ib_ber is derived in the window store, never read here.
    assert "ib_ber" not in by_dev["mlx5_0"].fields
    # 8 ConnectX-7 (hca_type MT4129) InfiniBand ports and a BlueField-3 (MT41692) Ethernet
    # bond; the capture has no GID tables, so no GID count.
    kinds = {dev: (p.fields["ib_hca_model"], p.fields["ib_link_layer"])
             for dev, p in by_dev.items()}
    assert kinds.pop("mlx5_bond_0") == (41692, 2) and set(kinds.values()) == {(4129, 1)}
    assert not any("ib_gid_roce_v2" in p.fields for p in points)


@needs_h100
def test_h100_readings_keep_phys_state_and_hw_counters() -> None:
    ports, rejected = read_ports(H100)
    assert not rejected
    r = next(p for p in ports if p.device == "mlx5_0")
    assert (r.port, r.state, r.phys_state, r.rate_gbps) == (1, 4, 5, 400)
    assert "out_of_sequence" in r.hw_counters and "VL15_dropped" in r.counters


@needs_h100
def test_h100_batch() -> None:
    batch = SchemaMapper().to_batch(read_sysfs(H100, "n1", TS))
    assert not batch.rejected
    frame = batch.frames[Scope.IB_PORT]
    assert len(frame) == 9
    assert frame.entities[1].key == "n1:mlx5_1:1"


@needs_ttar
def test_ttar_trees(tmp_path: Path) -> None:
    unpack_ttar(TTAR.read_bytes(), tmp_path)
    rejected: list[Rejection] = []
    points = read_sysfs(tmp_path / TTAR_ROOT, "n2", TS, rejected)
    assert not rejected
    got = {(p.tags["device"], p.tags["port"]): p.fields for p in points}
    assert sorted(got) == [("hfi1_0", "1"), ("mlx4_0", "1"), ("mlx4_0", "2"), ("mlx5_0", "1")]
    assert got["hfi1_0", "1"]["ib_rate"] == 100  # 100 Gb/sec (4X EDR)
    assert got["mlx4_0", "2"]["ib_rate"] == 40  # 40 Gb/sec (4X QDR)
    assert got["mlx5_0", "1"]["ib_rate"] == 25  # 25 Gb/sec (1X EDR)
    assert {f["ib_state"] for f in got.values()} == {4}
    assert {f["ib_symbol_error"] for f in got.values()} == {0}
    assert {f["ib_link_downed"] for f in got.values()} == {0}
    assert got["hfi1_0", "1"]["ib_port_rcv_data"] == 345091702026
    assert got["mlx5_0", "1"]["ib_port_xmit_data"] == 2880761508848
    # Every port InfiniBand (Omni-Path's hfi1 too); models from hca_type MT4099 (ConnectX-3)
    # and MT4118 (ConnectX-4 Lx); hfi1 has no hca_type and the tree no PCI device: no model.
    assert {f["ib_link_layer"] for f in got.values()} == {1}
    assert {k: f.get("ib_hca_model") for k, f in got.items()} == {
        ("hfi1_0", "1"): None, ("mlx4_0", "1"): 4099, ("mlx4_0", "2"): 4099,
        ("mlx5_0", "1"): 4118}


@needs_h100
def test_garbage_file_rejected_other_ports_kept(tmp_path: Path) -> None:
    root = tmp_path / "infiniband"
    shutil.copytree(H100, root)
    port = root / "mlx5_4" / "ports" / "1"
    for f in port.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    (port / "counters" / "symbol_error").chmod(0o644)
    (port / "counters" / "symbol_error").write_text("lots\n")
    (port / "state").chmod(0o644)
    (port / "state").write_text("ACTIVE-ish\n")
    rejected: list[Rejection] = []
    points = read_sysfs(root, "n1", TS, rejected)
    assert [str(r) for r in rejected] == [
        "mlx5_4/ports/1/state: cannot parse 'ACTIVE-ish' (n1:mlx5_4:1, state)",
        "mlx5_4/ports/1/counters/symbol_error: counter is not a non-negative integer: 'lots' "
        "(n1:mlx5_4:1, symbol_error)",
    ]
    assert len(points) == 9
    bad = next(p for p in points if p.tags["device"] == "mlx5_4")
    assert "ib_symbol_error" not in bad.fields and "ib_state" not in bad.fields
    assert bad.fields["ib_rate"] == 400 and bad.fields["ib_port_rcv_errors"] == 14


@pytest.mark.parametrize(("text", "rate"), [
    ("400 Gb/sec (4X NDR)", 400), ("2.5 Gb/sec (1X SDR)", 2.5), ("56 Gb/sec (4X FDR)", 56)])
def test_rate_spellings(tmp_path: Path, text: str, rate: float) -> None:
    port = tmp_path / "dev0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text(text + "\n")
    (port / "state").write_text("1: DOWN\n")
    [p] = read_sysfs(tmp_path, "h", TS)
    assert p.fields == {"ib_rate": rate, "ib_state": 1}


def test_numbers_too_large_for_a_float_are_refused_file_by_file(tmp_path: Path) -> None:
    from collectors.schema import batch_to_lines

    port = tmp_path / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("9" * 400 + " Gb/sec (4X NDR)\n")
    (port / "counters" / "symbol_error").write_text("9" * 400 + "\n")
    (port / "counters" / "link_downed").write_text(f"{2**63}\n")  # past line protocol's ints
    (port / "counters" / "port_rcv_errors").write_text(f"{2**63 - 1}\n")
    rejected: list[Rejection] = []
    [p] = read_sysfs(tmp_path, "n1", TS, rejected)
    assert p.fields == {"ib_state": 4, "ib_port_rcv_errors": 2**63 - 1}
    assert [(r.metric, r.reason.split(": ", 1)[1]) for r in rejected] == [
        ("rate", "value 999999999999...999999 (400 digits) is out of range"),
        ("link_downed", "counter 9223372036854775808 (19 digits) is out of range (above "
                        "2**63 - 1, which line protocol's integers end at)"),
        ("symbol_error", "counter 999999999999...999999 (400 digits) is out of range (above "
                         "2**63 - 1, which line protocol's integers end at)"),
    ]
    batch = SchemaMapper().to_batch([p], rejected)  # no OverflowError on the way to a batch
    assert len(list(batch_to_lines(batch))) == 1
