from __future__ import annotations

from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.nvidia_smi import NvlinkInactiveError, SmiParseError, parse_nvlink_status
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


def _states(text: str, **kw: int) -> dict[tuple[int, int], float]:
    points = parse_nvlink_status(text, "n1", TS, **kw)
    for p in points:
        assert p.measurement == "nvlink" and p.ts_ns == TS and p.tags["host"] == "n1"
    assert SchemaMapper().to_batch(points).rejected == []
    return {(int(p.tags["gpu"]), int(p.tags["link"])): float(p.fields["nvlink_state"])
            for p in points}


@pytest.mark.parametrize("path", files(TEXT_DIR, is_nvlink))
def test_every_nvlink_capture(path: Path) -> None:
    text = path.read_text()
    if "all links are inactive" in text:
        with pytest.raises(NvlinkInactiveError):
            parse_nvlink_status(text, "n1", TS)
    else:
        states = _states(text)
        assert states and set(states.values()) == {1.0}


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


def test_all_inactive_is_a_clear_failure() -> None:
    text = need(TEXT_DIR / "azurehpc-bad_nvlink_status-a100.txt").read_text()
    with pytest.raises(NvlinkInactiveError, match="all NVLink links are inactive on GPU 6") as e:
        parse_nvlink_status(text, "n1", TS)
    assert e.value.gpus == [6] and isinstance(e.value, ValueError)
    # With the link count known, each link is reported down instead.
    states = _states(text, links_per_gpu=12)
    assert states == {(6, link): 0.0 for link in range(12)}


def test_all_inactive_gpu_among_active_ones_takes_their_link_count() -> None:
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\n"
            "\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n"
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-b)\n"
            "NVML: Unable to retrieve NVLink information as all links are inactive\n")
    assert _states(text) == {(0, 0): 1.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}


@pytest.mark.parametrize("path", files(TEXT_DIR, is_bundle))
def test_bundle_nvlink_sections(path: Path) -> None:
    [body] = [b for cmd, b in bundle_sections(path) if cmd == "nvidia-smi nvlink -s"]
    if "h100" in path.name:
        states = _states(body)  # 18 links at 26.562 GB/s
        assert states == {(0, link): 1.0 for link in range(18)}
    elif "l40s" in path.name:
        assert _states(body) == {}  # "Device does not have or support Nvlink"
    else:
        # 595 drivers spell it "all links are inActive".
        with pytest.raises(NvlinkInactiveError):
            parse_nvlink_status(body, "n1", TS)


def test_garbage_raises() -> None:
    with pytest.raises(SmiParseError, match="no 'GPU <n>:' line"):
        parse_nvlink_status("Link 0: 25 GB/s\n", "n1", TS)
