"""A GPU's identity as every source spells it (collectors.identity): what a value may be, what
counts as no value, how bus ids are written, and how partial identities join."""

from __future__ import annotations

import pytest

from collectors.identity import GpuIdentity, bus_id, clean, dcgm_fields, merge_into

UUID = "GPU-513536b6-7d19-9063-b049-1e69664bb298"


@pytest.mark.parametrize("raw", ["N/A", "[N/A]", "[Not Supported]", "[Unknown Error]",
                                 "[GPU is lost]", "  ", "0000000000000"])
def test_a_tools_no_value_is_no_value(raw: str) -> None:
    assert clean({"serial": raw}) == (GpuIdentity(), [])


@pytest.mark.parametrize(("raw", "bus"), [
    ("00000000:18:00.0", "00000000:18:00.0"), ("0000:9a:00.0", "00000000:9A:00.0"),
    ("PCI:0000:1e:00", "00000000:1E:00.0"), ("1e:00.0", "00000000:1E:00.0")])
def test_bus_ids_read_as_nvidia_smi_and_dcgm_exporter_write_them(raw: str, bus: str) -> None:
    assert bus_id(raw) == bus
    assert clean({"pci_bus_id": raw})[0].pci_bus_id == bus


def test_bad_values_are_refused_one_by_one_and_the_rest_kept() -> None:
    got, problems = clean({"uuid": UUID, "serial": 'x"y', "model": "A" * 129,
                           "pci_bus_id": "bus 3", "driver": 535, "vbios": "92.00.36.00.02",
                           "other": "ignored"})
    assert got == GpuIdentity(uuid=UUID, vbios="92.00.36.00.02")
    assert [p.partition(":")[0] for p in problems] == ["serial", "pci_bus_id", "model",
                                                       "driver"]
    assert "longer than 128 characters" in problems[2]


def test_whitespace_inside_a_value_is_one_space() -> None:
    assert clean({"model": " NVIDIA  H100\t80GB HBM3 "})[0].model == "NVIDIA H100 80GB HBM3"


def test_partial_identities_join_newer_on_top() -> None:
    into = {"n1:gpu0": GpuIdentity(uuid=UUID, driver="535.54.03", at=10.0)}
    merge_into(into, {"n1:gpu0": GpuIdentity(serial="1650522003820", driver="550.90.07",
                                             at=20.0)})
    merge_into(into, {"n1:gpu0": GpuIdentity(driver="520.00.00", model="A100", at=5.0)})
    assert into["n1:gpu0"] == GpuIdentity(uuid=UUID, serial="1650522003820", model="A100",
                                          driver="550.90.07")
    assert into["n1:gpu0"].at == 20.0


def test_another_board_is_told_only_by_a_uuid_or_serial_both_say() -> None:
    a = GpuIdentity(uuid=UUID, serial="1")
    assert a.board_change(GpuIdentity(serial="2")) == "serial 1 -> 2"
    assert a.board_change(GpuIdentity(uuid=UUID, driver="x")) is None
    assert a.board_change(GpuIdentity(model="other")) is None
    assert GpuIdentity(uuid=UUID).board_change(GpuIdentity(serial="9")) is None


def test_dcgm_exporter_labels_name_the_identity() -> None:
    assert dcgm_fields({"UUID": UUID, "modelName": "NVIDIA L4", "pci_bus_id": "00000000:31:00.0",
                        "DCGM_FI_DRIVER_VERSION": "580.105.08", "Hostname": "n1",
                        "DCGM_FI_DEV_SERIAL": ""}) == {
        "uuid": UUID, "model": "NVIDIA L4", "pci_bus_id": "00000000:31:00.0",
        "driver": "580.105.08"}
