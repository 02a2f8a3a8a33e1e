"""collectors.pcie: each GPU's PCIe link and AER counters from a /sys/bus/pci/devices tree (our
own capture, tests/collectors/captures/pcie), and the HCA's link on its IB ports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Scope
from collectors.infiniband import read_sysfs, unpack_ttar
from collectors.pcie import PcieCollector, gpu_devices, read_link
from service.commands.cli import main
from tests.collectors.own_captures import IB_TTAR, IB_TTAR_ROOT, PCI_DEVICES, read

TS = 1_700_000_000_000_000_000


def test_gpus_are_the_nvidia_display_functions_in_bus_order() -> None:
    assert [d.name for d in gpu_devices(PCI_DEVICES)] == ["0000:18:00.0", "0000:2a:00.0"]


def test_link_and_aer_of_each_gpu() -> None:
    good, bad = (read_link(d) for d in gpu_devices(PCI_DEVICES))
    assert good.gpu_fields() == {
        "pcie_link_width": 16, "pcie_link_width_max": 16, "pcie_link_gen": 5,
        "pcie_link_gen_max": 5, "pcie_aer_correctable_total": 0, "pcie_aer_nonfatal_total": 0,
        "pcie_aer_fatal_total": 0}
    assert (bad.width, bad.width_max, bad.gen, bad.gen_max) == (8, 16, 1, 5)
    assert (bad.aer_correctable, bad.aer_nonfatal, bad.aer_fatal) == (304, 0, 1)
    assert good.refused == bad.refused == []


@pytest.mark.parametrize(("name", "text", "why"), [
    ("current_link_speed", "Unknown\n", None),  # no link: generation 0
    ("current_link_speed", "8 GT/s\n", None),  # an older kernel's spelling
    ("current_link_speed", "9 GT/s PCIe\n", "not a PCIe link speed"),
    ("current_link_width", "x16\n", "not a link width"),
    ("current_link_width", "99\n", "not a link width"),
    ("aer_dev_fatal", "DLP 1\n", "no TOTAL_ERR_FATAL line"),
    ("aer_dev_fatal", "TOTAL_ERR_FATAL " + "9" * 30 + "\n", "is not a count"),
])
def test_odd_files_are_refused_one_by_one(tmp_path: Path, name: str, text: str,
                                          why: str | None) -> None:
    dev = tmp_path / "0000:18:00.0"
    shutil.copytree(PCI_DEVICES / "0000:18:00.0", dev)
    (dev / name).write_text(text)
    link = read_link(dev)
    if why is None:
        assert link.refused == [] and link.gen in (0, 3)
    else:
        assert len(link.refused) == 1 and why in link.refused[0] and name in link.refused[0]
        assert link.width_max == 16  # the other readings stay


def test_collector_puts_each_gpu_on_nvidia_smis_index() -> None:
    c = PcieCollector(host="n1", root=PCI_DEVICES, clock=lambda: 1.7e9,
                      gpu_index={"00000000:2A:00.0": 0, "00000000:18:00.0": 1})
    batch = c.collect()
    assert c.status.up and batch.rejected == []
    frame = batch.frames[Scope.GPU]
    col = CATALOG.column(Scope.GPU, "pcie_link_width")
    widths = {frame.entities[s].unit: frame.values[i, col] for i, s in enumerate(frame.rows)}
    assert widths == {"0": 8.0, "1": 16.0}


def test_collector_without_a_map_uses_bus_order_and_asks_again(tmp_path: Path) -> None:
    asked = []

    def refresh() -> dict[str, int]:
        asked.append(1)
        return {}

    c = PcieCollector(host="n1", root=PCI_DEVICES, refresh_index=refresh)
    points, _ = c.read(TS)
    assert [p.tags["gpu"] for p in points] == ["0", "1"] and asked
    missing = PcieCollector(host="n1", root=tmp_path / "absent")
    assert missing.collect().samples == 0 and not missing.status.up


def test_parse_a_copied_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "pcie", str(PCI_DEVICES), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(" ")[0] for x in lines] == ["gpu,gpu=0,host=n7", "gpu,gpu=1,host=n7"]
    assert "pcie_aer_fatal_total=1i" in lines[1] and "pcie_link_width=8" in lines[1]


def test_hca_link_width_on_each_ib_port(tmp_path: Path) -> None:
    unpack_ttar(read(IB_TTAR).encode(), tmp_path, [])
    ports = {p.tags["device"]: p.fields for p in read_sysfs(tmp_path / IB_TTAR_ROOT, "n1", TS)}
    assert (ports["mlx5_2"]["nic_pcie_link_width"], ports["mlx5_2"]["nic_pcie_link_width_max"]) \
        == (16, 16)
    assert (ports["mlx5_3"]["nic_pcie_link_width"], ports["mlx5_3"]["nic_pcie_link_width_max"]) \
        == (8, 16)
