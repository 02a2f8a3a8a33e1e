"""The real pynvml on a machine without the NVIDIA driver: down with a reason, never a raise."""

from __future__ import annotations

import pynvml
import pytest

from collectors.base import Collector
from collectors.nvml import NvmlCollector
from collectors.nvml.api import NvmlApi
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_real_pynvml_without_library_is_down_with_reason() -> None:
    if _driver_present():
        pytest.skip("an NVIDIA driver is present here; this case needs a machine without one")
    c = NvmlCollector(HOST)  # the default: the real pynvml
    assert isinstance(c, Collector)
    batch = c.collect()
    assert not c.status.up
    assert "NVML library not found" in c.status.reason
    assert batch.samples == 0 and not batch.frames and len(batch.events) == 0
    # Still down, still no exception, on the next tick.
    assert c.collect().samples == 0 and not c.status.up


def test_missing_binding_is_down_with_reason() -> None:
    def no_pynvml() -> NvmlApi:
        raise ImportError("No module named 'pynvml'")

    c = NvmlCollector(HOST, loader=no_pynvml)
    assert c.collect().samples == 0
    assert not c.status.up and "pynvml is not installed" in c.status.reason


def test_init_is_retried_until_the_driver_loads() -> None:
    fake = FakeNvml([{"gpu_temp": 30.0}])
    fake.init_error = pynvml.NVMLError_DriverNotLoaded()
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: 1.0)
    assert c.collect().samples == 0
    assert not c.status.up and c.status.reason == "NVIDIA driver not loaded"
    fake.init_error = None
    assert c.collect().samples == 2  # gpu_temp and gpu_unreadable 0
    assert c.status.up and c.status.reason == ""
    assert fake.calls["nvmlInit"] == 2
    c.collect()
    assert fake.calls["nvmlInit"] == 2  # one session, not one per tick


def test_other_init_error_names_the_nvml_error() -> None:
    fake = FakeNvml([])
    fake.init_error = pynvml.NVMLError_NoPermission()
    c = NvmlCollector(HOST, nvml=fake)
    c.collect()
    assert not c.status.up
    assert c.status.reason == "nvmlInit failed: Insufficient Permissions"
