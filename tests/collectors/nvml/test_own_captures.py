"""The NVML collector serving our own captures (tests/collectors/captures/) through the NVML
stand-in: runs in a fresh clone; the real A100 captures under ../shared are the thorough tests."""

from __future__ import annotations

import pytest

from collectors.nvml import NvmlCollector
from tests.collectors.nvml.captures import own_a100_text, own_h100_xml
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, events, values


def test_own_a100_readings() -> None:
    got = values(NvmlCollector(HOST, nvml=FakeNvml(own_a100_text()), clock=lambda: T0).collect())
    g1 = got[(1,)]
    assert (g1["gpu_temp"], g1["mem_temp"], g1["power_draw"]) == (83, 90, pytest.approx(388.05))
    assert (g1["ecc_sbe_volatile"], g1["ecc_dbe_volatile"]) == (17, 2)
    assert (g1["remapped_rows_correctable"], g1["remapped_rows_uncorrectable"],
            g1["remapped_rows_pending"]) == (2, 1, 1)
    assert (g1["throttle_thermal"], g1["throttle_power"]) == (1, 0)
    assert got[(0,)]["ecc_sbe_volatile"] == 0
    assert "retired_pages_sbe" not in g1  # N/A in the capture: missing, never zero


def test_own_h100_lost_gpu_and_xids() -> None:
    fake = FakeNvml(own_h100_xml())
    c = NvmlCollector(HOST, nvml=fake, clock=lambda: T0)
    assert values(c.collect())[(1,)]["gpu_temp_margin"] == 8
    fake.lost.add(0)
    fake.xid_queue = {1: [94]}
    batch = c.collect()
    assert values(batch)[(0,)] == {"gpu_unreadable": 3}  # lost: its state, nothing else
    assert values(batch)[(1,)]["gpu_unreadable"] == 0
    assert c.status.up and "GPU 0 lost" in c.status.reason
    assert events(batch) == [(f"{HOST}:gpu1", "xid", 94.0)]
