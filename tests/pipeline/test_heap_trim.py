"""Freed heap goes back to the system after ticks (service/heap.py): at most once a minute by
the service's clock, at once when the window store grew or forgot entities; where the C library
has no malloc_trim, nothing is called."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

from service.assembly import Wiring
from service.heap import HeapTrim, _malloc_trim
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds


class Calls:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, pad: int) -> int:
        assert pad == 0  # trim everything free, keep no padding
        self.n += 1
        return 1


def test_trims_at_most_once_a_minute_unless_the_layout_changed() -> None:
    calls = Calls()
    heap = HeapTrim(every_s=60.0, trim=calls)
    assert heap.after_tick(T0)  # the first tick trims (warm-up just allocated)
    assert not heap.after_tick(T0 + 5) and not heap.after_tick(T0 + 59.9)
    assert heap.after_tick(T0 + 60)
    assert heap.after_tick(T0 + 65, changed=True)  # grown or compacted: at once
    assert heap.after_tick(T0 + 10)  # the clock went back: not held off for a minute
    assert calls.n == heap.trims == 4


def test_without_malloc_trim_nothing_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libc-that-is-not-there.so")
    assert _malloc_trim() is None
    heap = HeapTrim()
    assert not heap.available and not heap.after_tick(T0, changed=True) and heap.trims == 0


def test_glibc_trim_runs() -> None:
    if _malloc_trim() is None:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    heap = HeapTrim()
    assert heap.after_tick(T0) and heap.trims == 1


def test_the_pipeline_trims_after_the_store_grows(tmp_path: Path) -> None:
    s = Settings(storage={"data_dir": tmp_path},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring(notifiers=(), remediate=False))
    calls = Calls()
    p.heap = HeapTrim(trim=calls)
    small, big = Rounds(nodes=1, gpus=2, links=1, ports=1), Rounds(nodes=40, gpus=2, links=1,
                                                                    ports=1)
    p.process(small.batch(T0), T0)
    assert calls.n == 1  # the first tick
    p.process(small.batch(T0 + 5), T0 + 5)
    assert calls.n == 1  # within the minute, nothing changed
    p.process(big.batch(T0 + 10), T0 + 10)  # 80 GPUs: the store grows past 64 slots
    assert calls.n == 2
    p.process(big.batch(T0 + 70), T0 + 70)
    assert calls.n == 3  # a minute after the last
