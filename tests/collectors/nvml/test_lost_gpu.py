"""A GPU that falls off the bus is reported; the others keep reporting."""

from __future__ import annotations

from collectors.nvml import NvmlCollector
from tests.collectors.nvml.captures import a100_text
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, values


def test_lost_gpu_is_named_and_the_others_report() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    assert sorted(values(c.collect())) == [(0,), (1,), (2,), (3,)]
    fake.lost.add(2)
    got = values(c.collect())
    assert sorted(got) == [(0,), (1,), (3,)]
    assert got[(1,)]["ecc_sbe_volatile"] == 353
    assert c.status.up and "GPU 2 lost" in c.status.reason
    assert c.lost == {2}
    # Lost is not unsupported: the GPU is asked again (a reset may bring it back).
    assert 2 not in c.unsupported or "gpu_temp" not in c.unsupported[2]
    fake.lost.clear()
    assert sorted(values(c.collect())) == [(0,), (1,), (2,), (3,)]
    assert c.status.up and c.status.reason == "" and c.lost == frozenset()


def test_gpu_lost_before_the_session_started() -> None:
    fake = FakeNvml(a100_text())
    fake.lost.add(0)  # nvmlDeviceGetHandleByIndex(0) answers GPU_IS_LOST
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    assert sorted(values(c.collect())) == [(1,), (2,), (3,)]
    assert c.status.up and c.lost == {0}
    fake.lost.clear()
    assert (0,) in values(c.collect())


def test_every_gpu_lost_is_down() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()
    fake.lost.update(range(4))
    batch = c.collect()
    assert batch.samples == 0
    assert not c.status.up and "all GPUs are lost" in c.status.reason
