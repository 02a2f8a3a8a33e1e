"""GPU readings from the NVML stand-in serving real A100 captures."""

from __future__ import annotations

import pynvml
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.nvml import NvmlCollector
from tests.collectors.nvidia_smi.fixtures import wrapper_string
from tests.collectors.nvml.captures import A100_TEXT, CAPTURES, a100_text, load
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, values


def _collector(fake: FakeNvml, **kw: object) -> NvmlCollector:
    return NvmlCollector(HOST, nvml=fake, clock=lambda: T0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_every_captured_value_comes_through(capture: str) -> None:
    gpus = load(capture)
    c = _collector(FakeNvml(gpus))
    batch = c.collect()
    assert c.status.up and c.status.reason == ""
    assert not batch.rejected
    got = values(batch)
    assert sorted(got) == [(i,) for i in range(len(gpus))]
    for i, want in enumerate(gpus):
        # Exactly the captured metrics: what the capture lacks is missing (NaN), never zero.
        assert got[(i,)] == pytest.approx(want)
    frame = batch.frames[Scope.GPU]
    assert set(frame.ts.tolist()) == {T0}


def test_a100_dram_errors_and_pending_remap() -> None:
    gpus = a100_text()
    # Cross-check the parser against the raw capture: GPU 1 logged 353 correctable DRAM errors.
    assert "DRAM Correctable              : 353" in wrapper_string(A100_TEXT, "out_a")
    got = values(_collector(FakeNvml(gpus)).collect())
    gpu1 = got[(1,)]
    assert gpu1["ecc_sbe_volatile"] == 353
    assert gpu1["ecc_sbe_aggregate"] == 353
    assert gpu1["remapped_rows_correctable"] == 1
    assert gpu1["remapped_rows_pending"] == 1
    assert gpu1["remapped_rows_failure"] == 0
    assert gpu1["power_draw"] == pytest.approx(60.31)  # 60310 mW from NVML
    assert gpu1["mem_temp"] == 41  # via nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)
    assert (gpu1["gpu_slowdown_temp"], gpu1["gpu_shutdown_temp"], gpu1["mem_max_temp"]) == (
        89, 92, 95)
    assert [got[(i,)]["remapped_rows_pending"] for i in range(4)] == [0, 1, 0, 0]
    # Ampere remaps rows instead of retiring pages, and this driver shows no T.Limit: missing.
    assert "retired_pages_dbe" not in gpu1 and "gpu_temp_margin" not in gpu1


def test_unsupported_calls_are_made_once_per_gpu() -> None:
    gpus = a100_text()  # retired pages and T.Limit are N/A on these A100s
    fake = FakeNvml(gpus)
    c = _collector(fake)
    for _ in range(3):
        c.collect()
    n = len(gpus)
    assert fake.calls["nvmlDeviceGetMarginTemperature"] == n
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 2 * n  # one per cause, once
    assert fake.calls["nvmlDeviceGetRetiredPagesPendingStatus"] == n
    assert fake.calls["nvmlDeviceGetTemperature"] == 3 * n  # supported: every tick
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 3 * n
    assert c.unsupported[1] >= {"gpu_temp_margin", "retired_pages_sbe", "retired_pages_dbe",
                                "retired_pages_pending"}
    assert "ecc_sbe_volatile" not in c.unsupported[1]
    assert all(m in CATALOG or m == "xid" for u in c.unsupported.values() for m in u)


def test_memory_temperature_not_supported_in_the_field_return_code() -> None:
    gpus = a100_text()
    del gpus[2]["mem_temp"]
    fake = FakeNvml(gpus)
    c = _collector(fake)
    for _ in range(3):
        got = values(c.collect())
    assert "mem_temp" not in got[(2,)] and got[(3,)]["mem_temp"] == 39
    assert fake.calls_by_gpu[("nvmlDeviceGetFieldValues", 2)] == 1
    assert fake.calls_by_gpu[("nvmlDeviceGetFieldValues", 3)] == 3
    assert "mem_temp" in c.unsupported[2]


def test_transient_errors_are_retried_not_marked_unsupported() -> None:
    fake = FakeNvml(a100_text())
    fake.failing["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_Unknown()
    c = _collector(fake)
    assert "power_draw" not in values(c.collect())[(0,)]
    del fake.failing["nvmlDeviceGetPowerUsage"]
    assert values(c.collect())[(0,)]["power_draw"] == pytest.approx(59.77)
    assert all("power_draw" not in u for u in c.unsupported.values())


def test_throttle_bits_from_event_reasons() -> None:
    gpus = a100_text()
    gpus[3]["throttle_thermal"] = 1.0  # the capture has none active: set one to see the bit
    gpus[0]["throttle_power"] = 1.0
    got = values(_collector(FakeNvml(gpus)).collect())
    assert got[(3,)]["throttle_thermal"] == 1 and got[(3,)]["throttle_power"] == 0
    assert got[(0,)]["throttle_power"] == 1 and got[(0,)]["throttle_hw_slowdown"] == 0


def test_throttle_falls_back_on_drivers_without_event_reasons() -> None:
    gpus = a100_text()
    gpus[2]["throttle_hw_slowdown"] = 1.0
    fake = FakeNvml(gpus, legacy_driver=True)
    c = _collector(fake)
    for _ in range(3):
        got = values(c.collect())
    assert got[(2,)]["throttle_hw_slowdown"] == 1 and got[(1,)]["throttle_hw_slowdown"] == 0
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == len(gpus)  # tried once
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3 * len(gpus)
    assert all("throttle_thermal" not in u for u in c.unsupported.values())


def test_one_entity_table_across_ticks() -> None:
    c = _collector(FakeNvml(a100_text()))
    first = c.collect().frames[Scope.GPU].entities
    assert c.collect().frames[Scope.GPU].entities is first


def test_close_ends_the_session_and_the_next_collect_starts_one() -> None:
    fake = FakeNvml(a100_text())
    c = _collector(fake)
    c.collect()
    c.close()
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.calls["nvmlEventSetFree"] == 4
    assert c.collect().samples > 0 and fake.calls["nvmlInit"] == 2
    # What was learned unsupported survives the new session.
    assert fake.calls["nvmlDeviceGetMarginTemperature"] == 4

