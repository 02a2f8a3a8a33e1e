"""`gpuhealth parse <source>` over our own captures (tests/collectors/captures/), one per source:
runs in a fresh clone; test_registry.py runs the same paths over the real captures in ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.commands.cli import main
from tests.collectors.own_captures import (
    DCGM_PAGE,
    DMESG_ISO,
    IB_ROCE_TTAR,
    IB_TTAR,
    SMI_NVLINK,
    SMI_TEXT,
    SMI_XML,
)


@pytest.mark.parametrize(("source", "capture", "want"), [
    # Each GPU's identity is a gpu_info line beside its readings.
    ("nvidia-smi", SMI_XML, ["gpu,gpu=0,host=n7 gpu_temp=52.0",
                             'gpu_info,gpu=0,host=n7 uuid="GPU-3c2d1e0f-',
                             "gpu,gpu=1,host=n7 gpu_temp=79.0",
                             'gpu_info,gpu=1,host=n7 uuid="GPU-b1c2d3e4-']),
    ("nvidia-smi", SMI_TEXT, ["gpu,gpu=0,host=n7 gpu_temp=47.0",
                              'gpu_info,gpu=0,host=n7 uuid="GPU-0a11c3f2-',
                              "gpu,gpu=1,host=n7 gpu_temp=83.0",
                              'gpu_info,gpu=1,host=n7 uuid="GPU-7f8e9d0c-']),
    # The exporter's last-Xid gauge is a reading of its own (0: none yet).
    ("dcgm-exporter", DCGM_PAGE, ['gpu_info,gpu=0,host=n7 uuid="GPU-5e1f7a20-',
                                  "gpu,gpu=0,host=n7 ",
                                  'gpu_info,gpu=1,host=n7 uuid="GPU-c4d3b2a1-',
                                  "gpu,gpu=1,host=n7 ",
                                  "xid,gpu=0,host=n7 ", "xid,gpu=1,host=n7 "]),
    ("infiniband", IB_TTAR, ["ib_port,device=mlx5_2,host=n7,port=1 ",
                             "ib_port,device=mlx5_3,host=n7,port=1 "]),
    ("infiniband", IB_ROCE_TTAR, ["ib_port,device=cxgb4_0,host=n7,port=1 ",
                                  "ib_port,device=mlx5_0,host=n7,port=1 ",
                                  "ib_port,device=mlx5_1,host=n7,port=1 "]),
    ("kernel-log", DMESG_ISO, ["xid,", "xid,", "xid,"]),
], ids=lambda v: v.name if isinstance(v, Path) else None)
def test_parse_prints_every_entity(source: str, capture: Path, want: list[str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", source, str(capture), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(want)
    assert all(line.startswith(w) for line, w in zip(lines, want, strict=True)), lines


def test_parse_nvlink_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "nvidia-smi", str(SMI_NVLINK), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 36
    down = [x.split(" ")[0] for x in lines if "nvlink_state=0" in x]
    assert down == ["nvlink,gpu=1,host=n7,link=5", "nvlink,gpu=1,host=n7,link=13"]


def test_parse_reports_a_cut_capture_and_goes_on(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.xml"
    text = SMI_XML.read_text(encoding="utf-8")
    cut.write_text(text[:len(text) // 2])
    assert main(["parse", "nvidia-smi", str(cut), str(SMI_TEXT)]) == 1
    out = capsys.readouterr()
    assert "cut.xml" in out.err and "does not parse" in out.err
    # The whole capture after it is still printed: two GPUs, readings and identity.
    assert [x.split(" ")[0] for x in out.out.splitlines()] == [
        "gpu,gpu=0,host=node", "gpu_info,gpu=0,host=node", "gpu,gpu=1,host=node",
        "gpu_info,gpu=1,host=node"]
