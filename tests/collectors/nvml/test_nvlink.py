"""NVLink links are walked until NVML says the link does not exist."""

from __future__ import annotations

import pynvml

from collectors.catalog import Scope
from collectors.nvml import NvmlCollector
from collectors.nvml.nvlink import METRICS
from tests.collectors.nvml.captures import a100_text
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, values


def test_links_stop_at_the_first_not_found() -> None:
    fake = FakeNvml(a100_text(), nvlinks={0: 12, 1: 12, 2: 12, 3: 12})  # A100 SXM4: 12 links
    fake.link_counters[(1, 5, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)] = 7
    fake.link_counters[(1, 5, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 2
    fake.link_counters[(3, 0, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY)] = 1
    fake.link_counters[(3, 11, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)] = 4
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    got = values(c.collect(), Scope.NVLINK)
    assert sorted(got) == [(g, link) for g in range(4) for link in range(12)]
    assert got[(1, 5)] == {"nvlink_state": 1, "nvlink_crc_flit": 7, "nvlink_crc_data": 0,
                           "nvlink_replay": 2, "nvlink_recovery": 0}
    assert got[(3, 0)]["nvlink_recovery"] == 1 and got[(3, 11)]["nvlink_crc_data"] == 4
    # 12 links and the one NOT_FOUND that ends the walk, per GPU.
    assert fake.calls_by_gpu[("nvmlDeviceGetNvLinkState", 0)] == 13
    assert not c.unsupported.get(0, frozenset()) & set(METRICS)


def test_gpu_without_nvlink_is_asked_once() -> None:
    fake = FakeNvml(a100_text(), nvlinks={0: 4})  # GPUs 1-3 answer NOT_SUPPORTED (PCIe cards)
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    for _ in range(3):
        got = values(c.collect(), Scope.NVLINK)
    assert sorted(got) == [(0, link) for link in range(4)]
    assert fake.calls_by_gpu[("nvmlDeviceGetNvLinkState", 1)] == 1
    assert fake.calls_by_gpu[("nvmlDeviceGetNvLinkState", 0)] == 3 * 5
    assert set(METRICS) <= c.unsupported[1]
