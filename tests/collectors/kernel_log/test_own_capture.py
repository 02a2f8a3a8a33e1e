"""parse_kernel_log and the file-following collector on our own `dmesg --time-format iso`
capture: runs in a fresh clone; the real kernel logs under ../shared are the thorough tests."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from collectors.kernel_log import FileFollower, KernelLogCollector, parse_kernel_log
from tests.collectors.own_captures import DMESG_ISO, read

# nvidia-smi's bus ids of the two GPUs the capture names; the indexes are ours.
GPU_MAP = {"00000000:45:00.0": 2, "00000000:C1:00.0": 5}
T31 = datetime.fromisoformat("2026-01-20T03:52:41.660015+00:00").timestamp()
T31_LAST = datetime.fromisoformat("2026-01-20T03:52:41.662780+00:00").timestamp()
T79 = datetime.fromisoformat("2026-01-20T04:07:19.305521+00:00").timestamp()


def _lines() -> list[str]:
    return read(DMESG_ISO).splitlines(keepends=True)


def test_xid_events() -> None:
    r = parse_kernel_log(_lines(), "n9", gpu_index=GPU_MAP)
    assert r.lines == 10 and r.ignored == 6 and not r.rejected and not r.notes
    assert [(e.key, e.code, e.bus_id, e.repeats, e.line) for e in r.events] == [
        ("n9:gpu5", 31, "0000:c1:00", 2, 3),  # two MMU faults within the window: one event
        ("n9:gpu2", 79, "0000:45:00", 1, 5),
        ("n9:gpu5", 63, "0000:c1:00", 1, 10),
    ]
    e31, e79, _ = r.events
    assert e31.ts == pytest.approx(T31) and e31.last_ts == pytest.approx(T31_LAST)
    assert (e31.pid, e31.process) == (90817, "torchrun")
    assert e31.detail.startswith("Ch 0000003a, intr 00000000. MMU Fault")
    assert (e79.pid, e79.process, e79.detail) == (None, None, "GPU has fallen off the bus.")


def test_unmapped_gpu_is_said() -> None:
    r = parse_kernel_log(_lines(), "n9", gpu_index={"00000000:45:00.0": 2})
    assert [e.code for e in r.events] == [31, 79, 63]
    assert len(r.notes) == 1 and "PCI 0000:c1:00 is not in the GPU map" in r.notes[0]


def test_malformed_lines_are_rejected_one_by_one_and_the_rest_kept() -> None:
    src = _lines()
    bad = [
        "2026-01-20T04:10:00,000000+00:00 NVRM: Xid (PCI:0000:45:00): seventy-nine, junk\n",
        "2026-01-20T04:10:00,000000+00:00 NVRM: Xid (PCI:zz:yy): 79, junk\n",
        "\x00\xff binary junk\n",
    ]
    cut = src[-1][:60]  # the last line cut short, inside its Xid prefix
    r = parse_kernel_log([*src[:5], *bad, *src[5:-1], cut], "n9", gpu_index=GPU_MAP)
    assert [e.code for e in r.events] == [31, 79]  # every whole Xid line is kept
    assert [x.line for x in r.rejected] == [6, 7, 13]
    assert all(x.reason for x in r.rejected)


def test_collector_follows_the_file(tmp_path: Path) -> None:
    src = _lines()
    log = tmp_path / "dmesg.log"
    log.write_text("".join(src[:2]))  # there before we started: never reported
    c = KernelLogCollector("n9", FileFollower(log), gpu_index=GPU_MAP, boot_time=0.0,
                           clock=lambda: T79 + 10)
    assert c.collect().events.keys == []
    with log.open("a") as fh:
        fh.write("".join(src[2:]) + src[-1][:40])  # the last line still being written
    b = c.collect()
    assert c.status.up, c.status.reason
    assert list(zip(b.events.keys, b.events.values, strict=True)) == [
        ("n9:gpu5", 31.0), ("n9:gpu2", 79.0), ("n9:gpu5", 63.0)]
    assert not b.rejected  # a partial last line waits for its newline
