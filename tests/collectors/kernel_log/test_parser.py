"""parse_kernel_log over the real captures, and every timestamp format built from their lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.kernel_log import TimeContext, parse_kernel_log
from collectors.kernel_log.messages import normalize_bus_id
from collectors.kernel_log.timestamps import Stamped, split_stamp
from tests.collectors.kernel_log.fixtures import (
    DECODE_13_43,
    FABRICMANAGER,
    GPU_MAP,
    IB_FLAP_SYSLOG,
    ISO_48_63_94,
    lines,
)


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


T48 = ts("2024-11-15T12:02:03.470068+00:00")
T63 = ts("2024-11-15T12:02:03.498753+00:00")
T94 = ts("2024-11-15T12:02:03.506595+00:00")
T94_LAST = ts("2024-11-15T12:02:03.638794+00:00")


def test_iso_dmesg_48_63_94() -> None:
    r = parse_kernel_log(lines(ISO_48_63_94), "n001", gpu_index=GPU_MAP)
    assert r.lines == 41 and r.ignored == 30 and not r.rejected and not r.notes
    assert [(e.key, e.code, e.bus_id, e.repeats) for e in r.events] == [
        ("n001:gpu3", 48, "0000:19:00", 1),
        ("n001:gpu3", 63, "0000:19:00", 1),
        ("n001:gpu3", 94, "0000:19:00", 9),
    ]
    e48, e63, e94 = r.events
    assert e48.ts == pytest.approx(T48) and e63.ts == pytest.approx(T63)
    assert e94.ts == pytest.approx(T94) and e94.last_ts == pytest.approx(T94_LAST)
    assert e48.pid is None and e48.process is None  # pid='<unknown>', name=<unknown>
    assert e48.detail.startswith("An uncorrectable double bit error (DBE)")
    assert e48.line == 11  # after ten nvidia-peermem lines


def test_iso_dmesg_pid_and_process() -> None:
    r = parse_kernel_log(lines(ISO_48_63_94), "n001", gpu_index=GPU_MAP, window_s=0)
    with_pid = [e for e in r.events if e.pid is not None]
    assert len(with_pid) == 8
    assert {(e.pid, e.process) for e in with_pid} == {(1248209, "python3.10")}
    assert with_pid[0].detail == "Ch 00000008"


def test_decoded_dmesg_13_43_unmapped_gpu() -> None:
    r = parse_kernel_log(lines(DECODE_13_43), "n002")  # no GPU map
    assert r.lines == 636 and r.ignored == 0 and not r.rejected
    assert r.notes == ["n002: PCI 0000:38:00 is not in the GPU map; its Xids go to gpu1014336 "
                       "(1000000 + its PCI address)"]
    assert {e.key for e in r.events} == {"n002:gpu1014336"}
    assert all(e.gpu is None and not e.mapped for e in r.events)
    by_code = {13: 0, 43: 0}
    for e in r.events:
        by_code[e.code] += e.repeats
    assert by_code == {13: 629, 43: 7}  # every line is counted exactly once
    first = r.events[0]
    assert first.code == 13
    assert first.ts == pytest.approx(ts("2025-01-21T02:21:33.498559+00:00"))
    x43 = [e for e in r.events if e.code == 43]
    assert len(x43) == 7 and all(e.repeats == 1 for e in x43)  # ~20 min apart, never folded
    assert (x43[-1].pid, x43[-1].process) == (2924364, "pt_main_thread")
    assert x43[-1].ts == pytest.approx(ts("2025-01-21T04:41:44.287197+00:00"))


@pytest.mark.parametrize("window_s, events_13", [(0.0, None), (60.0, 9), (3600.0, 3)])
def test_coalescing_window(window_s: float, events_13: int | None) -> None:
    r = parse_kernel_log(lines(DECODE_13_43), "n002", window_s=window_s)
    n13 = sum(1 for e in r.events if e.code == 13)
    assert sum(e.repeats for e in r.events if e.code == 13) == 629
    if events_13 is None:  # window 0 folds only lines with the very same time stamp
        assert n13 > 600
    else:
        assert n13 == events_13


def test_coalescing_is_per_gpu_and_code() -> None:
    src = lines(ISO_48_63_94)
    other_gpu = [ln.replace("PCI:0000:19:00", "PCI:0000:2a:00") for ln in src]
    r = parse_kernel_log(src + other_gpu, "n1", gpu_index={**GPU_MAP, "0000:2a:00": 5})
    assert [(e.key, e.code, e.repeats) for e in r.events] == [
        ("n1:gpu3", 48, 1), ("n1:gpu3", 63, 1), ("n1:gpu3", 94, 9),
        ("n1:gpu5", 48, 1), ("n1:gpu5", 63, 1), ("n1:gpu5", 94, 9),
    ]


@pytest.mark.parametrize("path", [FABRICMANAGER, IB_FLAP_SYSLOG], ids=lambda p: p.name)
def test_logs_without_xids_are_ignored_not_rejected(path: Path) -> None:
    src = lines(path)
    r = parse_kernel_log(src, "n1", year=2025)
    assert r.events == [] and r.sxids == [] and r.rejected == []
    assert r.ignored == r.lines == len(src)


BOOT = T48 - 1234.5


def _rewritten(fmt: str) -> list[str]:
    """The capture's Xid lines re-stamped in another format, at the same instants."""
    out = []
    for ln in lines(ISO_48_63_94):
        if "NVRM: Xid" not in ln:
            continue
        stamp, msg = ln.rstrip("\n").split(" ", 1)
        when = datetime.fromisoformat(stamp.replace(",", "."))
        up = when.timestamp() - BOOT
        if fmt == "uptime":
            out.append(f"[{up:12.6f}] {msg}")
        elif fmt == "decode-uptime":
            out.append(f"kern  :warn  : [{up:12.6f}] {msg}")
        elif fmt == "kmsg":
            out.append(f"4,{1000 + len(out)},{round(up * 1e6)},-;{msg}")
        elif fmt == "syslog":
            out.append(f"{when:%b} {when.day:2d} {when:%H:%M:%S} gpu-node-7 kernel: {msg}")
        elif fmt == "journal-iso":
            out.append(f"{when:%Y-%m-%dT%H:%M:%S%z} gpu-node-7 kernel: {msg}")
        elif fmt in ("ctime", "decode-ctime"):  # dmesg -T, dmesg --decode -T
            prefix = "kern  :warn  : " if fmt == "decode-ctime" else ""
            out.append(f"{prefix}[{when:%a %b} {when.day:2d} {when:%H:%M:%S %Y}] {msg}")
    return out


@pytest.mark.parametrize("fmt", ["uptime", "decode-uptime", "kmsg", "syslog", "journal-iso",
                                 "ctime", "decode-ctime"])
def test_every_timestamp_format(fmt: str) -> None:
    src = _rewritten(fmt)
    r = parse_kernel_log(src, "n001", gpu_index=GPU_MAP, boot_time=BOOT,
                         now=ts("2024-12-01T00:00:00+00:00"))
    assert not r.rejected and r.ignored == 0
    assert [(e.code, e.repeats) for e in r.events] == [(48, 1), (63, 1), (94, 9)]
    whole_seconds = ("syslog", "journal-iso", "ctime", "decode-ctime")
    tol = 1.0 if fmt in whole_seconds else 1e-5
    assert r.events[0].ts == pytest.approx(T48, abs=tol)
    assert r.events[2].key == "n001:gpu3"


def test_syslog_year_rolls_back_across_new_year() -> None:
    ctx = TimeContext(now=ts("2025-01-02T00:00:00+00:00"))
    s = split_stamp("Dec 31 23:59:59 h kernel: NVRM: Xid (PCI:0000:19:00): 79, x", ctx)
    assert isinstance(s, Stamped)
    assert s.ts == ts("2024-12-31T23:59:59+00:00")
    assert s.message.startswith("NVRM: Xid")
    fixed = split_stamp("Dec 31 23:59:59 h kernel: m", TimeContext(year=2019))
    assert isinstance(fixed, Stamped) and fixed.ts == ts("2019-12-31T23:59:59+00:00")


def test_sxid_lines_are_separate_records() -> None:
    # NVSwitch lines in the shape GPUd's sxid README shows (no capture of one is in fixtures).
    src = [
        "[ 5000.000001] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 "
        "LTSSM Fault Up",
        "[ 5000.000002] nvidia-nvswitch0: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 44 "
        "egress non-posted PRIV error (First)",
        "[ 5000.000003] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Data {0x1, 0x2}",
        *_rewritten("uptime")[:1],
    ]
    r = parse_kernel_log(src, "n1", gpu_index=GPU_MAP, boot_time=BOOT)
    assert [(s.switch, s.bus_id, s.code, s.fatal) for s in r.sxids] == [
        ("nvidia-nvswitch3", "0000:05:00", 20034, True),
        ("nvidia-nvswitch0", "0000:c6:00", 12028, False),
        ("nvidia-nvswitch3", "0000:05:00", 20034, None),
    ]
    assert r.sxids[0].ts == pytest.approx(BOOT + 5000.000001)
    assert r.sxids[0].detail == "Link 30 LTSSM Fault Up"
    assert [e.code for e in r.events] == [48]  # SXids never become Xid events


def test_garbage_is_counted_never_raised() -> None:
    src = [
        "",
        "\x00\x01\x02 binary junk \xff",
        "NVRM: Xid",  # Xid word, no stamp
        "2024-11-15T12:02:03,470068+00:00 NVRM: Xid (PCI:0000:19:00): forty-eight, junk",
        "2024-11-15T12:02:03,470068+00:00 NVRM: Xid (PCI:zz:yy): 48, junk",
        "[  12.345] NVRM: Xid (PCI:0000:19:00): 48, no boot time given",
        "9,1,2,-;NVRM: Xid (PCI:0000:19:00): 48, kmsg without boot time",
        "2024-13-45T99:99:99 NVRM: Xid (PCI:0000:19:00): 48, impossible date",
        "random words with Xid in them",
        "[ 1.0] unrelated kernel line",
        *lines(ISO_48_63_94)[10:11],
    ]
    r = parse_kernel_log(src, "n1", gpu_index=GPU_MAP)
    assert r.lines == len(src)
    assert [e.code for e in r.events] == [48]
    assert [x.line for x in r.rejected] == [3, 4, 5, 6, 7, 8]
    assert r.ignored == 4
    assert "boot time" in r.rejected[3].reason


@pytest.mark.parametrize("text, want", [
    ("PCI:0000:19:00", "0000:19:00"),
    ("00000000:19:00.0", "0000:19:00"),
    ("0000:3B:00.0", "0000:3b:00"),
    ("19:00.0", "0000:19:00"),
    ("garbage", None),
])
def test_bus_id_spellings(text: str, want: str | None) -> None:
    assert normalize_bus_id(text) == want


def test_bad_gpu_map_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        parse_kernel_log([], "n1", gpu_index={"gpu0": 0})


def test_iso_without_zone_uses_the_given_zone() -> None:
    s = split_stamp("2024-11-15T12:02:03 NVRM: m", TimeContext(tz=UTC))
    assert isinstance(s, Stamped) and s.ts == ts("2024-11-15T12:02:03+00:00")


# dmesg -T of a GPU falling off the bus, in the shape real hosts print it (our own lines): the
# day of the month is space-padded, the time is local (here the zone given).
DMESG_T = """\
[Sun Feb  2 16:24:10 2025] nvidia-nvswitch0: probe of 0000:05:00.0 done
[Sun Feb  2 16:24:18 2025] NVRM: Xid (PCI:0000:38:00): 79, pid=4412, name=python3, GPU has \
fallen off the bus.
[Sun Feb  2 16:24:18 2025] NVRM: GPU 0000:38:00.0: GPU has fallen off the bus.
[Sun Feb  2 16:24:19 2025] NVRM: Xid (PCI:0000:38:00): 79, pid=4412, name=python3, GPU has \
fallen off the bus.
""".splitlines()


def test_dmesg_T_human_time_stamps() -> None:
    from datetime import timedelta, timezone

    pst = timezone(timedelta(hours=-8))
    r = parse_kernel_log(DMESG_T, "n4", gpu_index={"00000000:38:00.0": 6}, tz=pst)
    assert not r.rejected and r.ignored == 2
    [e] = r.events
    assert (e.key, e.code, e.repeats, e.pid, e.process) == ("n4:gpu6", 79, 2, 4412, "python3")
    assert e.ts == ts("2025-02-02T16:24:18-08:00")
    bad = split_stamp("[Sun Feb 30 16:24:18 2025] NVRM: Xid (PCI:0000:38:00): 79, x",
                      TimeContext())
    assert bad == "bad dmesg -T time 'Sun Feb 30 16:24:18 2025'"


def test_numbers_too_large_for_a_float_are_rejected_not_raised() -> None:
    huge = "9" * 400
    src = [
        f"2024-11-15T12:02:03+00:00 NVRM: Xid (PCI:0000:19:00): {huge}, junk",
        f"[{huge}.5] NVRM: Xid (PCI:0000:19:00): 48, uptime past any boot",
        f"4,1,{huge},-;NVRM: Xid (PCI:0000:19:00): 48, kmsg past any boot",
        f"2024-11-15T12:02:03+00:00 nvidia-nvswitch1: SXid (PCI:0000:05:00.0): {huge}, Fatal",
        *lines(ISO_48_63_94)[10:11],
    ]
    r = parse_kernel_log(src, "n1", gpu_index=GPU_MAP, boot_time=BOOT)
    assert [e.code for e in r.events] == [48] and r.sxids == []
    assert [x.line for x in r.rejected] == [1, 2, 3, 4]
    assert "Xid code 999999999999... is out of range" in r.rejected[0].reason
    assert "out of range" in r.rejected[1].reason and "out of range" in r.rejected[2].reason
