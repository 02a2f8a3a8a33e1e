"""KernelLogCollector driven by real capture lines appended to temp files between collects."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collectors.base import Collector
from collectors.kernel_log import FileFollower, JournalFollower, KernelLogCollector, KmsgReader
from tests.collectors.kernel_log.fixtures import GPU_MAP, ISO_48_63_94, lines

T48 = datetime.fromisoformat("2024-11-15T12:02:03.470068+00:00").timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def append(path: Path, text: list[str] | str) -> None:
    with path.open("a") as fh:
        fh.write(text if isinstance(text, str) else "".join(text))


def file_collector(path: Path, **kw: Any) -> KernelLogCollector:
    return KernelLogCollector("n001", FileFollower(path), gpu_index=GPU_MAP, boot_time=0.0,
                              clock=Clock(T48 + 10), **kw)


def codes(c: KernelLogCollector) -> list[tuple[str, float, str, float]]:
    b = c.collect()
    assert c.status.up, c.status.reason
    return list(zip(b.events.keys, b.events.ts, b.events.metrics, b.events.values, strict=True))


def test_follows_a_growing_file_from_its_end(tmp_path: Path) -> None:
    src = lines(ISO_48_63_94)
    log = tmp_path / "dmesg.log"
    log.write_text("".join(src[:10]))  # old lines: there before we started, never reported
    c = file_collector(log)
    assert isinstance(c, Collector)
    assert codes(c) == []
    append(log, src[10:12])  # Xid 48 and 63
    got = codes(c)
    assert [(k, m, v) for k, _, m, v in got] == [("n001:gpu3", "xid", 48.0), ("n001:gpu3", "xid",
                                                                            63.0)]
    assert got[0][1] == pytest.approx(T48)
    assert codes(c) == []  # nothing new


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    src = lines(ISO_48_63_94)
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = file_collector(log)
    codes(c)
    line = src[10]
    append(log, line[:40])
    assert codes(c) == []
    append(log, line[40:])
    assert [v for *_, v in codes(c)] == [48.0]


def test_storm_split_across_collects_is_one_event(tmp_path: Path) -> None:
    src = lines(ISO_48_63_94)
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = file_collector(log)
    codes(c)
    append(log, src[12:16])  # the first four Xid 94 lines
    assert [v for *_, v in codes(c)] == [94.0]
    first = c.last_events[0]
    append(log, src[16:21])  # five more inside the same 60 s window
    assert codes(c) == []
    assert first.repeats == 9  # the event already handed out carries the whole count


def test_rotation_and_truncation(tmp_path: Path) -> None:
    src = lines(ISO_48_63_94)
    log = tmp_path / "kern.log"
    log.write_text("")
    c = file_collector(log, window_s=0.0)
    codes(c)
    append(log, src[10:11])  # 48
    assert [v for *_, v in codes(c)] == [48.0]
    # logrotate: rename, the writer still appends to the old inode, then a new file appears.
    rotated = tmp_path / "kern.log.1"
    log.rename(rotated)
    append(rotated, src[11:12])  # 63, written late to the old file
    log.write_text("".join(src[12:13]))  # 94, first line of the new file
    assert [v for *_, v in codes(c)] == [63.0, 94.0]
    append(log, src[13:14])
    assert [v for *_, v in codes(c)] == [94.0]
    # copytruncate: same inode, size drops below our offset -> read from the top.
    log.write_text("".join(src[10:11]))
    assert [v for *_, v in codes(c)] == [48.0]


def test_missing_file_is_down_then_recovers(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    c = file_collector(log)
    b = c.collect()
    assert not c.status.up and "kernel log unreadable" in c.status.reason
    assert len(b.events) == 0
    log.write_text("".join(lines(ISO_48_63_94)[10:11]))  # appeared after start: all of it is new
    assert [v for *_, v in codes(c)] == [48.0]
    log.unlink()  # mid-rotation: the path is gone for a moment
    c.collect()
    assert not c.status.up


def test_unmapped_gpu_is_reported_in_status(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = KernelLogCollector("n9", FileFollower(log), boot_time=0.0, clock=Clock(T48))
    c.collect()
    append(log, lines(ISO_48_63_94)[10:11])
    b = c.collect()
    # Delivered on an entity ingest accepts: 1000000 + the PCI address 0x1900.
    assert b.events.keys == ["n9:gpu1006400"]
    assert c.status.up and "not in the GPU map" in c.status.reason
    assert "gpu1006400" in c.status.reason


def test_garbage_appended_is_rejected_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text("")
    c = file_collector(log)
    c.collect()
    append(log, ["\x00junk\n", "NVRM: Xid (PCI:0000:19:00): 48, no stamp\n",
                 *lines(ISO_48_63_94)[10:11]])
    b = c.collect()
    assert c.status.up and [v for v in b.events.values] == [48.0]
    assert [r.line for r in b.rejected] == [2]


def kmsg_records(boot: float) -> list[str]:
    """The capture's Xid lines as /dev/kmsg records (usec since `boot`)."""
    out = []
    for i, ln in enumerate(lines(ISO_48_63_94)):
        stamp, msg = ln.rstrip("\n").split(" ", 1)
        usec = round((datetime.fromisoformat(stamp.replace(",", ".")).timestamp() - boot) * 1e6)
        out.append(f"6,{500 + i},{usec},-;{msg}\n")
    return out


def test_kmsg_reader_starts_at_the_end(tmp_path: Path) -> None:
    boot = T48 - 3600.0
    recs = kmsg_records(boot)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "kmsg").write_text("".join(recs[:11]))  # this boot's old records include Xid 48
    c = KernelLogCollector.from_kmsg("n001", dev, gpu_index=GPU_MAP, boot_time=boot,
                                     clock=Clock(T48))
    assert codes(c) == []
    append(dev / "kmsg", [*recs[11:13], " SUBSYSTEM=pci\n"])  # 63, 94, a continuation line
    got = codes(c)
    assert [v for *_, v in got] == [63.0, 94.0]
    assert got[0][1] == pytest.approx(datetime.fromisoformat(
        "2024-11-15T12:02:03.498753+00:00").timestamp(), abs=1e-5)


def test_kmsg_unreadable_is_down(tmp_path: Path) -> None:
    c = KernelLogCollector("n001", KmsgReader(tmp_path / "no-kmsg"), boot_time=0.0)
    c.collect()
    assert not c.status.up and "no-kmsg" in c.status.reason


def test_boot_time_from_proc(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1731668523\nprocesses 9\n")
    c = KernelLogCollector("n1", KmsgReader(tmp_path / "kmsg"), proc_root=tmp_path)
    assert c.boot_time == 1731668523.0
    (tmp_path / "stat").unlink()
    (tmp_path / "uptime").write_text("100.5 200.0\n")
    c = KernelLogCollector("n1", KmsgReader(tmp_path / "kmsg"), proc_root=tmp_path,
                           clock=Clock(1000.0))
    assert c.boot_time == 899.5


def test_journal_follower_reads_a_subprocess(tmp_path: Path) -> None:
    # journalctl -o short-iso lines rebuilt from the capture, printed by a stand-in process.
    out = tmp_path / "journal.txt"
    jl = []
    for ln in lines(ISO_48_63_94)[10:13]:
        stamp, msg = ln.rstrip("\n").split(" ", 1)
        when = datetime.fromisoformat(stamp.replace(",", "."))
        jl.append(f"{when:%Y-%m-%dT%H:%M:%S%z} gpu-node-7 kernel: {msg}\n")
    out.write_text("".join(jl))
    src = JournalFollower([sys.executable, "-c",
                           f"import sys; sys.stdout.write(open({str(out)!r}).read())"],
                          timeout_s=10.0)
    c = KernelLogCollector("n001", src, gpu_index=GPU_MAP, boot_time=0.0, clock=Clock(T48))
    try:
        assert [v for *_, v in codes(c)] == [48.0, 63.0, 94.0]
        c.collect()  # the stand-in exited: reported once as down
        assert not c.status.up and "exited with status 0" in c.status.reason
    finally:
        c.close()


def test_journal_missing_binary_is_down() -> None:
    c = KernelLogCollector("n1", JournalFollower(["/nonexistent/journalctl"]), boot_time=0.0)
    c.collect()
    assert not c.status.up and "unreadable" in c.status.reason


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="no readable /dev/kmsg here")
def test_the_real_kmsg_is_read_from_its_end_without_blocking() -> None:
    """This machine's own kernel log: opening it must skip the boot messages already there
    (they are history, not new Xids) and a read must return at once when nothing is new."""
    import time

    c = KernelLogCollector.from_kmsg("here")
    t0 = time.monotonic()
    first = c.collect()
    second = c.collect()
    assert time.monotonic() - t0 < 2.0
    assert c.status.up, c.status.reason
    assert len(first.events) == 0 and len(second.events) == 0
    c.close()


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="no journalctl here")
def test_the_real_journalctl_is_up_or_says_why() -> None:
    """journalctl exists here but may have no journal to read (a container): either way the
    collector answers at once, with a reason when it is down, and never raises."""
    c = KernelLogCollector.from_journal("here")
    batch = c.collect()
    assert c.status.up or c.status.reason
    assert len(batch.events) == 0
    c.close()


class CountingFetch:
    """nvidia-smi's bus map as a callable that counts how often it was asked."""

    def __init__(self, answer: dict[str, int]) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> dict[str, int]:
        self.calls += 1
        return self.answer


def test_a_gpu_missing_from_the_start_map_is_mapped_after_a_refresh(tmp_path: Path) -> None:
    # The GPU was not visible when the agent started (a swap, or a driver still loading):
    # its first Xid refetches the map, and it lands on gpu3 like every other source's data.
    src = lines(ISO_48_63_94)
    log = tmp_path / "dmesg.log"
    log.write_text("")
    fetch = CountingFetch(GPU_MAP)
    clock = Clock(T48 + 10)
    c = KernelLogCollector("n001", FileFollower(log), gpu_index={}, refresh_index=fetch,
                           boot_time=0.0, clock=clock)
    assert codes(c) == []  # opens the log at its end
    append(log, src[10:12])
    assert [k for k, *_ in codes(c)] == ["n001:gpu3", "n001:gpu3"]
    assert fetch.calls == 1  # the second line hit the refreshed map
    assert c.status.reason == ""  # mapped: no "not in the GPU map" note


def test_refresh_of_an_unmappable_bus_is_rate_limited(tmp_path: Path) -> None:
    src = lines(ISO_48_63_94)
    log = tmp_path / "dmesg.log"
    log.write_text("")
    fetch = CountingFetch({})  # nvidia-smi knows no such GPU (or fails)
    clock = Clock(T48 + 10)
    c = KernelLogCollector("n001", FileFollower(log), gpu_index={}, refresh_index=fetch,
                           boot_time=0.0, clock=clock)
    assert codes(c) == []
    append(log, src[10:13])
    # Never mapped: its own index (1000000 + PCI 0x1900), not a guessed real one.
    assert {k for k, *_ in codes(c)} == {"n001:gpu1006400"}
    assert fetch.calls == 1
    clock.now += 30
    append(log, src[10:11])
    codes(c)
    assert fetch.calls == 1  # within a minute of the last try: not asked again
    clock.now += 31
    fetch.answer = GPU_MAP  # the GPU is back on the bus
    append(log, src[11:12])
    assert [k for k, *_ in codes(c)] == ["n001:gpu3"]
    assert fetch.calls == 2
