"""A GPU that falls off the bus, or answers it needs a reset or an unknown error, is reported as its
gpu_unreadable state; the others keep reporting."""

from __future__ import annotations

import pynvml
import pytest

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
    assert got[(2,)] == {"gpu_unreadable": 3}
    assert [got[(i,)]["gpu_unreadable"] for i in (0, 1, 3)] == [0, 0, 0]
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
    assert values(c.collect())[(0,)] == {"gpu_unreadable": 3}
    assert c.status.up and c.lost == {0}
    fake.lost.clear()
    assert values(c.collect())[(0,)]["gpu_unreadable"] == 0


def test_every_gpu_lost_is_down() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()
    fake.lost.update(range(4))
    batch = c.collect()
    assert values(batch) == {(i,): {"gpu_unreadable": 3} for i in range(4)}
    assert not c.status.up and "all GPUs are lost" in c.status.reason


@pytest.mark.parametrize(("error", "state"), [
    (pynvml.NVMLError_ResetRequired(), 2),  # "GPU requires reset"
    (pynvml.NVMLError_Unknown(), 1),  # "Unknown Error"
])
def test_a_gpu_in_a_bad_state_is_its_state_and_the_others_read(error: Exception,
                                                                state: int) -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()
    fake.gpu_errors[1] = error
    got = values(c.collect())
    assert got[(1,)] == {"gpu_unreadable": state}
    assert got[(0,)]["gpu_unreadable"] == 0 and got[(0,)]["gpu_temp"] > 0
    assert c.status.up
    del fake.gpu_errors[1]
    assert values(c.collect())[(1,)]["gpu_unreadable"] == 0  # reset: readable again


def test_an_unknown_error_from_one_feature_is_not_the_gpus() -> None:
    fake = FakeNvml(a100_text())
    fake.failing["nvmlDeviceGetPcieReplayCounter"] = pynvml.NVMLError_Unknown()
    got = values(NvmlCollector(HOST, nvml=fake, clock=lambda: T0).collect())
    assert all(g["gpu_unreadable"] == 0 and "pcie_replay" not in g for g in got.values())


def test_unknown_error_for_the_handle_is_the_gpus_state() -> None:
    fake = FakeNvml(a100_text())
    fake.handle_errors[3] = pynvml.NVMLError_Unknown()
    got = values(NvmlCollector(HOST, nvml=fake, clock=lambda: T0).collect())
    assert got[(3,)] == {"gpu_unreadable": 1} and got[(2,)]["gpu_unreadable"] == 0


def test_a_gpu_gone_from_the_device_count_is_not_found() -> None:
    fake = FakeNvml(a100_text())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    c.collect()
    c.close()
    fake.gpus = fake.gpus[:3]  # after a driver reload the count no longer reaches GPU 3
    got = values(c.collect())
    assert got[(3,)] == {"gpu_unreadable": 5} and got[(2,)]["gpu_unreadable"] == 0


def test_pcie_link_from_nvml() -> None:
    gpu = {"gpu_temp": 40.0, "pcie_link_width": 8.0, "pcie_link_width_max": 16.0,
           "pcie_link_gen": 4.0, "pcie_link_gen_max": 5.0}
    got = values(NvmlCollector(HOST, nvml=FakeNvml([gpu]), clock=lambda: T0).collect())
    assert got[(0,)] == {**gpu, "gpu_unreadable": 0}
