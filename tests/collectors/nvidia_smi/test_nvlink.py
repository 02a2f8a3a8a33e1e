from __future__ import annotations

from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.frames import Rejection
from collectors.nvidia_smi import SmiParseError, looks_like_nvlink_status, parse_nvlink_status
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import (
    TEXT_DIR,
    bundle_sections,
    files,
    is_bundle,
    is_nvlink,
    need,
)

TS = 1_700_000_000_000_000_000


def _states(text: str, notes: list[str] | None = None,
            **kw: int) -> dict[tuple[int, int], float]:
    points = parse_nvlink_status(text, "n1", TS, notes=notes, **kw)
    for p in points:
        assert p.measurement == "nvlink" and p.ts_ns == TS and p.tags["host"] == "n1"
    assert SchemaMapper().to_batch(points).rejected == []
    return {(int(p.tags["gpu"]), int(p.tags["link"])): float(p.fields["nvlink_state"])
            for p in points}


@pytest.mark.parametrize("path", files(TEXT_DIR, is_nvlink))
def test_every_nvlink_capture(path: Path) -> None:
    text = path.read_text()
    assert looks_like_nvlink_status(text)
    states = _states(text)
    # An A100 whose links are all inactive: its 12 links reported down, never dropped.
    assert states and set(states.values()) == ({0.0} if "all links are inactive" in text
                                               else {1.0})


def test_eight_a100_with_twelve_links_each() -> None:
    states = _states(need(TEXT_DIR / "gpud-nvidia-smi.nvlink.status.a100").read_text())
    assert len(states) == 8 * 12
    assert {g for g, _ in states} == set(range(8))
    assert {link for _, link in states} == set(range(12))
    batch = SchemaMapper().to_batch(parse_nvlink_status(
        need(TEXT_DIR / "gpud-nvidia-smi.nvlink.status.a100").read_text(), "n1", TS))
    assert len(batch.frames[Scope.NVLINK]) == 96


def test_one_gpu_capture_keeps_its_index() -> None:
    states = _states(need(TEXT_DIR / "azurehpc-good_nvlink_status-a100.txt").read_text())
    assert set(states) == {(7, link) for link in range(12)}


def test_all_inactive_reports_every_link_down() -> None:
    text = need(TEXT_DIR / "azurehpc-bad_nvlink_status-a100.txt").read_text()
    notes: list[str] = []
    # The link count comes from the SKU (A100-SXM4: 12), or from the caller when given.
    assert _states(text, notes) == {(6, link): 0.0 for link in range(12)}
    assert notes == []
    assert _states(text, links_per_gpu=4) == {(6, link): 0.0 for link in range(4)}


def test_all_inactive_of_an_unknown_sku_reports_link_0_down_and_says_so() -> None:
    text = ("GPU 2: NVIDIA Future GPU (UUID: GPU-x)\n"
            "NVML: Unable to retrieve Nvlink information as all links are inActive\n")
    notes: list[str] = []
    assert _states(text, notes) == {(2, 0): 0.0}
    assert len(notes) == 1 and "GPU 2" in notes[0] and "link count is unknown" in notes[0]
    assert "UUID" not in notes[0] and "NVIDIA Future GPU" in notes[0]


def test_a_gpu_without_nvlink_has_no_links_and_a_note() -> None:
    text = ("GPU 0: NVIDIA L4 (UUID: GPU-x)\nDevice does not have or support Nvlink\n"
            "GPU 1: NVIDIA L4 (UUID: GPU-y)\nDevice does not have or support Nvlink\n")
    notes: list[str] = []
    assert _states(text, notes) == {}
    assert [n.split(" has")[0] for n in notes] == ["GPU 0", "GPU 1"]


def test_mig_device_lines_are_skipped() -> None:
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\n"
            "  MIG 3g.40gb     Device  0: (UUID: MIG-b)\n"
            "\t Link 0: <inactive>\n\t Link 1: <inactive>\n"
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-c)\n"
            "  MIG 7g.80gb     Device  0: (UUID: MIG-d)\n"
            "NVML: Unable to retrieve NVLink information as all links are inactive\n")
    assert _states(text) == {(0, 0): 0.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}


def test_gpu_list_is_not_nvlink_status() -> None:
    listing = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\nGPU 1: NVIDIA A100 (UUID: GPU-b)\n"
    assert not looks_like_nvlink_status(listing)
    with pytest.raises(SmiParseError, match="no GPU of this output gives a link status"):
        parse_nvlink_status(listing, "n1", TS)


def test_all_inactive_gpu_among_active_ones_takes_their_link_count() -> None:
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\n"
            "\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n"
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-b)\n"
            "NVML: Unable to retrieve NVLink information as all links are inactive\n")
    assert _states(text) == {(0, 0): 1.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}


@pytest.mark.parametrize("path", files(TEXT_DIR, is_bundle))
def test_bundle_nvlink_sections(path: Path) -> None:
    [body] = [b for cmd, b in bundle_sections(path) if cmd == "nvidia-smi nvlink -s"]
    assert looks_like_nvlink_status(body)
    notes: list[str] = []
    states = _states(body, notes)
    if "h100" in path.name:
        assert states == {(0, link): 1.0 for link in range(18)}  # 18 links at 26.562 GB/s
        assert notes == []
    elif "l40s" in path.name:
        assert states == {}  # "Device does not have or support Nvlink"
        assert notes == ["GPU 0 has no NVLink (nvidia-smi: the device does not have or "
                         "support NVLink)"]
    else:
        # 595 drivers spell it "Unable to retrieve Nvlink information as all links are
        # inActive"; a GeForce's link count is not known: link 0 stands for them.
        assert states == {(0, 0): 0.0}
        assert "link count is unknown" in notes[0]


@pytest.mark.parametrize("path", files(TEXT_DIR, lambda n: is_nvlink(n) or is_bundle(n)))
def test_no_real_link_line_is_refused(path: Path) -> None:
    text = path.read_text()
    if is_bundle(path.name):
        [text] = [b for cmd, b in bundle_sections(path) if cmd == "nvidia-smi nvlink -s"]
    rejected: list[Rejection] = []
    notes: list[str] = []
    points = parse_nvlink_status(text, "n1", TS, notes=notes, rejected=rejected)
    assert rejected == []
    assert not any("no readable status" in n for n in notes)
    lines = [x for x in text.splitlines() if x.strip().startswith("Link ")]
    if lines:  # every "Link <n>:" line of the capture is a point of its own
        assert len(points) == len(lines)


def test_garbage_raises() -> None:
    with pytest.raises(SmiParseError, match="no 'GPU <n>:' line"):
        parse_nvlink_status("Link 0: 25 GB/s\n", "n1", TS)
