"""Each GPU's identity from a dcgm-exporter page: exact values from the real L4 and T4 pages and
our own, one identity per board under MIG, and the collector's through line protocol and back."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.dcgm import DcgmExporterCollector, parse_exposition
from collectors.identity import GpuIdentity
from collectors.schema import SchemaMapper, batch_to_lines
from tests.collectors.dcgm.pages import L4, T4, exposition, needs_pages
from tests.collectors.dcgm.test_collector import page, serve
from tests.collectors.own_captures import DCGM_MIG_PAGE, DCGM_PAGE, read

TS = 1_700_000_000_000_000_000

L4_ID = GpuIdentity(uuid="GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
                    pci_bus_id="00000000:31:00.0", model="NVIDIA L4", driver="580.105.08")
T4_ID = GpuIdentity(uuid="GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea",
                    pci_bus_id="00000000:00:1E.0", model="Tesla T4", driver="580.105.08")


@needs_pages
@pytest.mark.parametrize(("path", "key", "want"), [
    (L4, "i-030791dc5a37cd257:gpu0", L4_ID), (T4, "ip-10-200-3-41:gpu0", T4_ID)],
    ids=["L4", "T4"])
def test_real_page_identity(path: Path, key: str, want: GpuIdentity) -> None:
    batch = SchemaMapper().to_batch(parse_exposition(exposition(path), None, TS))
    assert not batch.rejected
    assert batch.identity == {key: want}
    assert batch.identity[key].at == TS / 1e9


def test_own_page_identity() -> None:
    batch = SchemaMapper().to_batch(parse_exposition(read(DCGM_PAGE), None, TS))
    assert batch.identity == {
        "gpu-node-b07:gpu0": GpuIdentity(uuid="GPU-5e1f7a20-3b4c-4d9e-8f01-a2b3c4d5e6f7",
                                         pci_bus_id="00000000:18:00.0",
                                         model="NVIDIA H100 80GB HBM3", driver="570.124.06"),
        "gpu-node-b07:gpu1": GpuIdentity(uuid="GPU-c4d3b2a1-0f9e-4a8b-b7c6-d5e4f3a2b1c0",
                                         pci_bus_id="00000000:9A:00.0",
                                         model="NVIDIA H100 80GB HBM3", driver="570.124.06")}


def test_mig_instances_give_one_identity_per_board() -> None:
    points = parse_exposition(read(DCGM_MIG_PAGE), None, TS)
    infos = [p for p in points if p.measurement == "gpu_info"]
    assert [p.tags for p in infos] == [{"host": "dgx-a07", "gpu": "0"},
                                       {"host": "dgx-a07", "gpu": "1"}]
    batch = SchemaMapper().to_batch(points)
    assert not batch.rejected
    assert batch.identity == {
        "dgx-a07:gpu0": GpuIdentity(uuid="GPU-2f4e6a8c-1b3d-4e5f-8a7b-9c0d1e2f3a4b",
                                    serial="1563620004411", pci_bus_id="00000000:07:00.0",
                                    model="NVIDIA A100-SXM4-40GB", vbios="92.00.45.00.06",
                                    driver="550.127.05"),
        "dgx-a07:gpu1": GpuIdentity(uuid="GPU-8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a",
                                    serial="1563620004412", pci_bus_id="00000000:0F:00.0",
                                    model="NVIDIA A100-SXM4-40GB", vbios="92.00.45.00.06",
                                    driver="550.127.05")}
    # No reading carries the identity as a tag any more.
    assert all(set(p.tags) <= {"host", "gpu", "mig", "link"} for p in points)


def test_a_page_without_identity_labels_has_none() -> None:
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 40\n'
    points = parse_exposition(text, None, TS)
    assert [p.measurement for p in points] == ["gpu"]


def test_a_bad_label_value_is_refused_and_the_rest_kept() -> None:
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x0",pci_bus_id="not a bus",'
            'modelName="NVIDIA L4",Hostname="n1"} 40\n')
    batch = SchemaMapper().to_batch(parse_exposition(text, None, TS))
    assert batch.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-x0", model="NVIDIA L4")}
    assert [(r.entity, r.metric) for r in batch.rejected] == [("n1:gpu0", "pci_bus_id")]


@pytest.mark.parametrize("capture", [DCGM_PAGE, DCGM_MIG_PAGE], ids=lambda p: p.name)
def test_collector_identity_through_line_protocol(capture: Path) -> None:
    with serve(page(read(capture))) as url:
        c = DcgmExporterCollector(url, clock=lambda: TS)
        batch = c.collect()
        c.close()
    assert c.status.up and not batch.rejected and len(batch.identity) == 2
    back = SchemaMapper().parse("\n".join(batch_to_lines(batch)))
    assert not back.rejected and back.identity == batch.identity
