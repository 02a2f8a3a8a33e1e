"""Xid errors from the NVML event API, drained every collect."""

from __future__ import annotations

import pynvml

from collectors.nvml import NvmlCollector
from tests.collectors.nvml.captures import a100_text
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, events


def test_queued_xids_are_drained_once() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()  # registers the event sets
    fake.xid_queue = {1: [79, 48], 3: [13]}
    batch = c.collect()
    assert events(batch) == [(f"{HOST}:gpu1", "xid", 79.0), (f"{HOST}:gpu1", "xid", 48.0),
                             (f"{HOST}:gpu3", "xid", 13.0)]
    assert batch.events.ts == [T0] * 3
    assert events(c.collect()) == []  # drained: nothing is reported twice
    assert set(fake.wait_timeouts) == {0}  # never blocks the collect loop
    assert fake.calls["nvmlEventSetCreate"] == 4
    assert fake.calls["nvmlDeviceRegisterEvents"] == 4


def test_xid_unsupported_is_registered_once() -> None:
    fake = FakeNvml(a100_text())
    fake.xid_unsupported.add(2)
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    for _ in range(3):
        c.collect()
    assert fake.calls_by_gpu[("nvmlDeviceRegisterEvents", 2)] == 1
    assert "xid" in c.unsupported[2]
    assert fake.calls["nvmlEventSetFree"] == 1  # the unusable set is not leaked
    fake.xid_queue = {0: [94]}
    assert events(c.collect()) == [(f"{HOST}:gpu0", "xid", 94.0)]


def test_transient_registration_failure_is_retried() -> None:
    fake = FakeNvml(a100_text()[:1])
    fake.failing["nvmlDeviceRegisterEvents"] = pynvml.NVMLError_Unknown()
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()
    del fake.failing["nvmlDeviceRegisterEvents"]
    c.collect()
    fake.xid_queue = {0: [31]}
    assert events(c.collect()) == [(f"{HOST}:gpu0", "xid", 31.0)]
    assert fake.calls["nvmlDeviceRegisterEvents"] == 2
    assert "xid" not in c.unsupported[0]


def test_xid_events_off() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0, xid_events=False)
    c.collect()
    assert fake.calls["nvmlEventSetCreate"] == 0 and fake.calls["nvmlEventSetWait_v2"] == 0
