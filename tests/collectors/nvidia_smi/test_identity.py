"""Each GPU's identity from nvidia-smi's `-q -x`, `-q` and `--query-gpu`: exact values from the
real captures under ../shared/fixtures and our own, a value nvidia-smi cannot read left out
without costing the GPU's other attributes, and the collector's identity through line protocol
and back."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.frames import Rejection
from collectors.identity import GpuIdentity
from collectors.nvidia_smi import (
    NvidiaSmiCollector,
    parse_query_csv,
    parse_query_csv_with_header,
    parse_text,
    parse_xml,
)
from collectors.schema import SchemaMapper, batch_to_lines
from tests.collectors.nvidia_smi.fixtures import (
    TEXT_DIR,
    XML_DIR,
    bundle_sections,
    files,
    infos,
    is_query_text,
    is_wrapper,
    need,
    wrapper_string,
)
from tests.collectors.nvidia_smi.test_collector import A100_ID, CSV, LINK, FakeClock, FakeRunner
from tests.collectors.own_captures import SMI_BAD_CSV, SMI_IDENTITY_CSV, SMI_TEXT, SMI_XML, read

TS = 1_700_000_000_000_000_000

A100 = {"uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "serial": "1650522003820",
        "pci_bus_id": "00000000:01:00.0", "model": "NVIDIA A100-SXM4-80GB",
        "vbios": "92.00.36.00.02", "driver": "535.54.03"}

XML_CASES = {
    "telegraf-a100-sxm4-v12.xml": A100,
    # DTD v10 without <pci_bus_id>, <serial>, <vbios_version> or <driver_version>: the bus id
    # is the <gpu id="..."> attribute.
    "telegraf-gtx-1070-ti.xml": {"uuid": "GPU-f9ba66fc-a7f5-94c5-da19-019ef2f9c665",
                                 "pci_bus_id": "00000000:01:00.0",
                                 "model": "GeForce GTX 1070 Ti"},
    # <serial>N/A</serial>: no serial, the rest kept.
    "telegraf-gtx-1660-ti.xml": {"uuid": "GPU-304a277d-3545-63b8-3a36-dfde3c992989",
                                 "pci_bus_id": "00000000:43:00.0", "model": "Graphics Device",
                                 "vbios": "90.16.25.00.4C", "driver": "418.43"},
    "telegraf-quadro-p2000-v12.xml": {"uuid": "GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
                                      "serial": "0322218049033", "pci_bus_id": "00000000:17:00.0",
                                      "model": "Quadro P2000", "vbios": "86.06.3F.00.30",
                                      "driver": "525.125.06"},
    "telegraf-rtx-4000-sff-ada-v13.xml": {"uuid": "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
                                          "serial": "REDACTED",
                                          "pci_bus_id": "00000000:06:00.0",
                                          "model": "NVIDIA RTX 4000 SFF Ada Generation",
                                          "vbios": "95.04.53.00.01", "driver": "595.84"},
    "telegraf-rtx-3060-v12.xml": {"uuid": "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
                                  "pci_bus_id": "00000000:2D:00.0",
                                  "model": "NVIDIA GeForce RTX 3060", "vbios": "94.04.71.00.69",
                                  "driver": "570.124.04"},
}


@pytest.mark.parametrize("name", sorted(XML_CASES))
def test_xml_capture_identity(name: str) -> None:
    rejected: list[Rejection] = []
    points = parse_xml(need(XML_DIR / name).read_text(), "n1", TS, rejected)
    assert infos(points) == {"0": XML_CASES[name]}
    assert rejected == []


@pytest.mark.parametrize("path", files(XML_DIR, lambda n: n.endswith(".xml")))
def test_every_xml_capture_names_each_gpu(path: Path) -> None:
    points = parse_xml(path.read_text(), "n1", TS)
    batch = SchemaMapper().to_batch(points)
    assert batch.rejected == []
    gpus = {p.tags["gpu"] for p in points if p.measurement == "gpu"}
    assert set(batch.identity) == {f"n1:gpu{g}" for g in gpus}
    for ident in batch.identity.values():
        assert ident.uuid.startswith("GPU-") and ident.pci_bus_id and ident.model


H100_TEXT = "gpud-nvidia-smi-query.535.183.01.out.0.valid"


def test_text_capture_identity() -> None:
    got = infos(parse_text(need(TEXT_DIR / H100_TEXT).read_text(), "n1", TS))
    assert len(got) == 8
    assert got["0"] == {"uuid": "GPU-566e6f65-c38e-b12f-4824-6944218668b9",
                        "serial": "1655022005478", "pci_bus_id": "00000000:53:00.0",
                        "model": "NVIDIA H100 80GB HBM3", "vbios": "96.00.74.00.01",
                        "driver": "535.183.01"}
    assert (got["1"]["uuid"], got["1"]["serial"], got["1"]["pci_bus_id"]) == (
        "GPU-9930d717-21dd-7692-054e-3d0a2bae76b5", "1654522012780", "00000000:64:00.0")
    assert got["2"]["serial"] == "1654922018857"


def test_text_geforce_has_no_serial() -> None:
    got = infos(parse_text(need(TEXT_DIR / "gpud-nvidia-smi-query.535.154.05.out.0.valid")
                           .read_text(), "n1", TS))
    assert got["0"] == {"uuid": "GPU-313bbff0-b0a0-fd26-4820-0578bdef3a12",
                        "pci_bus_id": "00000000:01:00.0", "model": "NVIDIA GeForce RTX 4090",
                        "vbios": "95.02.18.C0.09", "driver": "535.154.05"}  # Serial Number: N/A


def test_text_board_serial_not_the_racks() -> None:
    text = wrapper_string(need(TEXT_DIR / "thamada-gls-H100SXMx8_smi.py"), "out_a")
    assert "RACK Serial Number                : N/A" in text
    got = infos(parse_text(text, "n1", TS))
    assert got["0"] == {"uuid": "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
                        "serial": "1654423001593", "pci_bus_id": "00000000:18:00.0",
                        "model": "NVIDIA H100 80GB HBM3", "vbios": "96.00.74.00.01",
                        "driver": "565.57.01"}


def test_text_section_capture_has_the_header_bus_and_driver() -> None:
    # `nvidia-smi -q -d PAGE_RETIREMENT`: no UUID or name, only the GPU header and the driver.
    path = need(TEXT_DIR / "azurehpc-orig_nvsmi8_output-page-retirement.txt")
    got = infos(parse_text(path.read_text(), "n1", TS))
    assert got["0"] == {"pci_bus_id": "00000001:00:00.0", "driver": "535.86.10"}
    assert got["7"] == {"pci_bus_id": "00000008:00:00.0", "driver": "535.86.10"}


@pytest.mark.parametrize("path", files(TEXT_DIR, lambda n: is_query_text(n) or is_wrapper(n)))
def test_every_text_capture_names_each_gpu(path: Path) -> None:
    text = wrapper_string(path, "out_a") if is_wrapper(path.name) else path.read_text()
    points = parse_text(text, "n1", TS)
    batch = SchemaMapper().to_batch(points)
    assert batch.rejected == []
    assert len(batch.identity) == len({p.tags["gpu"] for p in points})
    for ident in batch.identity.values():
        assert ident.pci_bus_id and ident.driver
        assert ident.uuid.startswith("GPU-") or "page-retirement" in path.name


def test_csv_bundle_identity() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-h100-80gb-hbm3"
                           "__590.48.01.txt")
    [(cmd, body)] = [(c, b) for c, b in bundle_sections(path)
                     if c.startswith("nvidia-smi --query-gpu=")][:1]
    fields = cmd.split("=", 1)[1].split(" ")[0].split(",")
    got = infos(parse_query_csv(body, fields, "n1", TS))
    # The capture is masked (its UUID and serial zeroed); the rest is as printed.
    assert {k: v for k, v in got["0"].items() if k != "serial"} == {
        "uuid": "GPU-00000000-0000-0000-0000-000000000000", "pci_bus_id": "00000000:00:09.0",
        "model": "NVIDIA H100 80GB HBM3", "vbios": "96.00.A5.00.01", "driver": "590.48.01"}


# ---- our own captures --------------------------------------------------------------------------

def test_own_xml_identity() -> None:
    got = infos(parse_xml(read(SMI_XML), "n1", TS))
    assert got == {
        "0": {"uuid": "GPU-3c2d1e0f-9a8b-4c7d-a6e5-f4d3c2b1a098", "serial": "1652023000000",
              "pci_bus_id": "00000000:4A:00.0", "model": "NVIDIA H100 80GB HBM3",
              "vbios": "96.00.89.00.01", "driver": "535.161.08"},
        "1": {"uuid": "GPU-b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e", "serial": "1652023000001",
              "pci_bus_id": "00000000:5D:00.0", "model": "NVIDIA H100 80GB HBM3",
              "vbios": "96.00.89.00.01", "driver": "535.161.08"}}


def test_own_text_identity() -> None:
    got = infos(parse_text(read(SMI_TEXT), "n1", TS))
    assert got["1"] == {"uuid": "GPU-7f8e9d0c-1b2a-4c3d-8e4f-5a6b7c8d9e0f",
                        "serial": "1324021000001", "pci_bus_id": "00000000:2C:00.0",
                        "model": "NVIDIA A100-SXM4-40GB", "vbios": "92.00.36.00.02",
                        "driver": "550.144.03"}
    assert got["0"]["serial"] == "1324021000000"


def test_unknown_error_serial_still_yields_the_uuid() -> None:
    rejected: list[Rejection] = []
    points = parse_query_csv_with_header(read(SMI_IDENTITY_CSV), "n1", TS, rejected)
    got = infos(points)
    assert got["0"] == {"uuid": "GPU-6a1f2e3d-4c5b-4a69-8877-1029384756af",
                        "serial": "1322723010417", "pci_bus_id": "00000000:21:00.0",
                        "model": "NVIDIA L40S", "vbios": "95.02.66.00.02",
                        "driver": "570.133.20"}
    # serial [Unknown Error]: no serial, every other attribute kept.
    assert got["1"] == {"uuid": "GPU-0b9c8d7e-6f5a-4b3c-9d2e-1f0a9b8c7d6e",
                        "pci_bus_id": "00000000:41:00.0", "model": "NVIDIA L40S",
                        "vbios": "95.02.66.00.02", "driver": "570.133.20"}
    assert got["2"] == {"uuid": "GPU-f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9",
                        "model": "NVIDIA L40S", "driver": "570.133.20"}
    assert rejected == []  # "no value" is not a bad value
    gpu = {p.tags["gpu"]: p.fields for p in points if p.measurement == "gpu"}
    assert (gpu["1"]["gpu_temp"], gpu["2"]["power_draw"]) == (41.0, 88.7)
    batch = SchemaMapper().to_batch(points)
    assert batch.identity["n1:gpu1"].uuid == "GPU-0b9c8d7e-6f5a-4b3c-9d2e-1f0a9b8c7d6e"
    assert batch.identity["n1:gpu1"].serial == ""


def test_bad_states_capture_keeps_the_bus_ids_it_reads() -> None:
    got = infos(parse_query_csv_with_header(read(SMI_BAD_CSV), "n1", TS))
    # GPU 3 is a handle-error line, GPU 5 prints [Unknown Error] for its bus id.
    assert got == {"0": {"pci_bus_id": "00000000:18:00.0"},
                   "1": {"pci_bus_id": "00000000:2A:00.0"},
                   "2": {"pci_bus_id": "00000000:3A:00.0"},
                   "4": {"pci_bus_id": "00000000:9A:00.0"}}


def test_a_value_that_is_not_one_is_refused_and_the_rest_kept() -> None:
    text = ("index, uuid, pci.bus_id, name\n"
            '0, GPU-0b9c8d7e-6f5a-4b3c-9d2e-1f0a9b8c7d6e, 0000:zz:00.0, "Bad=Name"\n')
    rejected: list[Rejection] = []
    got = infos(parse_query_csv_with_header(text, "n1", TS, rejected))
    assert got == {"0": {"uuid": "GPU-0b9c8d7e-6f5a-4b3c-9d2e-1f0a9b8c7d6e"}}
    assert sorted((r.entity, r.metric) for r in rejected) == [
        ("n1:gpu0", "model"), ("n1:gpu0", "pci_bus_id")]


# ---- the collector -------------------------------------------------------------------------------

def _xml() -> str:
    return need(XML_DIR / "telegraf-a100-sxm4-v12.xml").read_text()


def test_collector_identity_each_tick_and_through_line_protocol() -> None:
    runner, clock = FakeRunner(_xml()), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock, xml_interval=60)
    batch = c.collect()
    assert batch.identity == {"n1:gpu0": GpuIdentity(**A100)}
    assert batch.identity["n1:gpu0"].at == clock.t
    back = SchemaMapper().parse("\n".join(batch_to_lines(batch)))
    assert not back.rejected and back.identity == batch.identity
    clock.t += 5  # the CSV alone: its identity columns
    later = c.collect()
    assert len(runner.calls) == 3 and later.identity == batch.identity


def test_collector_xml_fills_what_the_csv_cannot_read() -> None:
    csv = CSV.replace("1650522003820", "[Unknown Error]")
    assert csv != CSV
    runner, clock = FakeRunner(_xml(), csv), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock, xml_interval=60)
    assert c.collect().identity["n1:gpu0"] == GpuIdentity(**A100)  # the XML's serial
    clock.t += 5
    assert c.collect().identity["n1:gpu0"] == GpuIdentity(**{**A100, "serial": ""})


def test_collector_without_identity_columns() -> None:
    row = CSV.replace(A100_ID, "").strip()
    fields = ["index", "temperature.gpu", "temperature.memory", "power.draw",
              "clocks.current.sm", "utilization.gpu",
              "clocks_throttle_reasons.hw_thermal_slowdown",
              "clocks_throttle_reasons.sw_power_cap", "clocks_throttle_reasons.hw_slowdown",
              "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max"]
    assert row.endswith(LINK.strip())
    c = NvidiaSmiCollector(host="n1", runner=FakeRunner(_xml(), row + "\n"), clock=FakeClock(),
                           xml_interval=60, query_fields=fields)
    batch = c.collect()
    assert c.status.up and batch.identity == {"n1:gpu0": GpuIdentity(**A100)}
