"""Each GPU's identity from NVML: read once per handle, kept through a lost GPU, re-read on a new
session or after `identity_refresh`, and never at the cost of the GPU's readings."""

from __future__ import annotations

import pynvml
import pytest

from collectors.identity import GpuIdentity
from collectors.nvml import NvmlCollector
from collectors.schema import SchemaMapper, batch_to_lines
from tests.collectors.nvml.captures import CAPTURES, identity, load
from tests.collectors.nvml.fake import FakeNvml
from tests.collectors.nvml.helpers import HOST, T0, values

_ID_CALLS = ("nvmlDeviceGetUUID", "nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo",
             "nvmlDeviceGetName", "nvmlDeviceGetVbiosVersion")


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def _fake(capture: str = "a100-xml", **kw: object) -> FakeNvml:
    ids, driver = identity(capture)
    return FakeNvml(load(capture), identity=ids, driver=driver, **kw)  # type: ignore[arg-type]


def _collector(fake: FakeNvml, clock: Clock | None = None, **kw: object) -> NvmlCollector:
    return NvmlCollector(HOST, nvml=fake, clock=clock or Clock(), **kw)  # type: ignore[arg-type]


def test_a100_capture_identity_exactly() -> None:
    batch = _collector(_fake("a100-xml")).collect()
    assert batch.identity == {f"{HOST}:gpu0": GpuIdentity(
        uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298", serial="1650522003820",
        pci_bus_id="00000000:01:00.0", model="NVIDIA A100-SXM4-80GB", vbios="92.00.36.00.02",
        driver="535.54.03")}
    assert batch.identity[f"{HOST}:gpu0"].at == T0
    assert not batch.rejected


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_capture_identity_comes_through(capture: str) -> None:
    ids, driver = identity(capture)
    batch = _collector(_fake(capture)).collect()
    assert batch.identity == {f"{HOST}:gpu{i}": GpuIdentity(**g, driver=driver)
                              for i, g in enumerate(ids)}
    assert all(g["uuid"].startswith("GPU-") and g["pci_bus_id"] for g in ids)


def test_own_a100_text_serials() -> None:
    batch = _collector(_fake("own-a100-text")).collect()
    assert [batch.identity[f"{HOST}:gpu{i}"].serial for i in (0, 1)] == [
        "1324021000000", "1324021000001"]
    assert batch.identity[f"{HOST}:gpu1"].uuid == "GPU-7f8e9d0c-1b2a-4c3d-8e4f-5a6b7c8d9e0f"
    assert batch.identity[f"{HOST}:gpu0"].driver == "550.144.03"


def test_read_once_per_handle_then_from_the_cache() -> None:
    fake = _fake("a100-text")
    c = _collector(fake)
    first = c.collect().identity
    for _ in range(3):
        assert c.collect().identity == first
    for fn in _ID_CALLS:
        assert fake.calls[fn] == 4, fn  # one per GPU, on the first collect only
    assert fake.calls["nvmlSystemGetDriverVersion"] == 4  # once per round


def test_a_new_session_or_the_refresh_rereads_and_sees_a_swap() -> None:
    fake, clock = _fake("a100-text"), Clock()
    c = _collector(fake, clock, identity_refresh=600)
    before = c.collect().identity[f"{HOST}:gpu2"]
    fake.identity[2]["serial"] = "1999999999999"  # another board at index 2
    clock.t += 599
    assert c.collect().identity[f"{HOST}:gpu2"].serial == before.serial  # still cached
    clock.t += 1
    after = c.collect().identity[f"{HOST}:gpu2"]
    assert after.serial == "1999999999999" and before.board_change(after) is not None
    fake.identity[2]["serial"] = "1888888888888"
    c.close()  # a new NVML session gets new handles: read again at once
    clock.t += 5
    assert c.collect().identity[f"{HOST}:gpu2"].serial == "1888888888888"


def test_geforce_has_no_serial_and_is_asked_once() -> None:
    fake = _fake("a100-xml")
    del fake.identity[0]["serial"]  # NVML_ERROR_NOT_SUPPORTED, as a GeForce board answers
    c = _collector(fake)
    for _ in range(3):
        got = c.collect().identity[f"{HOST}:gpu0"]
    assert got.serial == "" and got.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert fake.calls["nvmlDeviceGetSerial"] == 1


@pytest.mark.parametrize("error", [pynvml.NVMLError_Unknown(), pynvml.NVMLError_GpuIsLost(),
                                   pynvml.NVMLError_Timeout(),
                                   UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")],
                         ids=["unknown", "lost", "timeout", "decode"])
@pytest.mark.parametrize("fn", _ID_CALLS)
def test_a_failing_identity_call_costs_only_that_attribute(fn: str, error: Exception) -> None:
    want = values(_collector(_fake("a100-text")).collect())
    fake = _fake("a100-text")
    fake.failing[fn] = error
    c = _collector(fake)
    batch = c.collect()
    assert values(batch) == want  # every reading, and gpu_unreadable 0 on every GPU
    assert c.status.up and c.status.reason == "" and not batch.rejected
    name = {"nvmlDeviceGetUUID": "uuid", "nvmlDeviceGetSerial": "serial",
            "nvmlDeviceGetPciInfo": "pci_bus_id", "nvmlDeviceGetName": "model",
            "nvmlDeviceGetVbiosVersion": "vbios"}[fn]
    ident = batch.identity[f"{HOST}:gpu1"]
    assert getattr(ident, name) == "" and ident.driver == "555.42.02"
    assert ident.serial or name == "serial"
    del fake.failing[fn]  # a failure is asked again next round
    assert getattr(c.collect().identity[f"{HOST}:gpu1"], name) != ""


def test_a_failing_driver_call_costs_nothing_else() -> None:
    fake = _fake("a100-text")
    fake.failing["nvmlSystemGetDriverVersion"] = pynvml.NVMLError_Unknown()
    batch = _collector(fake).collect()
    assert values(batch) == values(_collector(_fake("a100-text")).collect())
    assert {i.driver for i in batch.identity.values()} == {""}
    assert all(i.uuid for i in batch.identity.values())


def test_a_lost_gpu_keeps_the_identity_last_read() -> None:
    fake = _fake("a100-text")
    c = _collector(fake)
    before = c.collect().identity
    fake.lost.add(2)
    batch = c.collect()
    assert values(batch)[(2,)] == {"gpu_unreadable": 3}
    assert batch.identity == before  # the lost board's serial is what its RMA needs


def test_a_gpu_in_a_bad_state_still_reports_its_state() -> None:
    fake = _fake("a100-text")
    fake.gpu_errors[1] = pynvml.NVMLError_Unknown()  # every call on its handle
    batch = _collector(fake).collect()
    assert values(batch)[(1,)] == {"gpu_unreadable": 1}
    assert batch.identity[f"{HOST}:gpu1"] == GpuIdentity(driver="555.42.02")
    assert batch.identity[f"{HOST}:gpu0"].serial == "1320222043305"


def test_an_old_binding_returning_bytes() -> None:
    want = _collector(_fake("a100-text")).collect().identity
    assert _collector(_fake("a100-text", as_bytes=True)).collect().identity == want


@pytest.mark.parametrize("capture", ["a100-text", "own-h100-xml"])
def test_round_trip_through_line_protocol(capture: str) -> None:
    batch = _collector(_fake(capture)).collect()
    back = SchemaMapper().parse("\n".join(batch_to_lines(batch)))
    assert not back.rejected
    assert back.identity == batch.identity
    assert {k: i.at for k, i in back.identity.items()} == {k: T0 for k in batch.identity}
