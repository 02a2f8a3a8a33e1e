"""An Xid from a GPU the bus map does not (or no longer) know is the GPU-fell-off-the-bus case:
it must reach the service on an entity ingest accepts and fire the hard rules for its node.

Bus-map fallbacks first, then end to end: `gpuhealth parse kernel-log` output and a node agent's
round, each POSTed to the real app's /write, then one scoring tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors.agent.loop import Agent
from collectors.agent.spool import Spool
from collectors.kernel_log import FileFollower, KernelLogCollector
from collectors.kernel_log.busmap import UNMAPPED_BASE, BusMap, How, Resolved, unmapped_index
from service.api.app import create_app
from service.api.state import Running
from service.commands.cli import main
from service.settings import Settings, StorageSettings
from tests.support.fleet import T0, ManualClock

NS = int(T0 * 1e9)
WHEN = datetime.fromtimestamp(T0 - 30, UTC)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_unmapped_index_is_stable_far_above_real_ones_and_decodes() -> None:
    assert unmapped_index("0000:38:00") == UNMAPPED_BASE + 0x3800 == 1014336
    assert unmapped_index("0000:19:00") == 1006400
    assert unmapped_index("0001:00:00") == UNMAPPED_BASE + 0x10000  # Azure-style domains
    assert unmapped_index("0000:00:04") == UNMAPPED_BASE + 0x20  # device 4 on bus 0 (a VM)
    assert len({unmapped_index(f"000{d}:{b:02x}:00") for d in range(4) for b in range(256)}) == 1024


def test_a_gpu_that_left_the_map_keeps_the_index_it_had() -> None:
    clock = Clock(0.0)
    answers = [{"00000000:2a:00.0": 4}]  # nvidia-smi no longer lists 19:00 (fallen off)
    m = BusMap({"00000000:19:00.0": 3, "00000000:2a:00.0": 4}, lambda: answers[-1], clock=clock)
    # Some unknown bus id prompts a refresh; 19:00 is gone from the fresh map.
    assert m.resolve("0000:77:00") == Resolved(unmapped_index("0000:77:00"), How.UNMAPPED)
    assert m.index("0000:19:00") is None
    assert m.resolve("0000:19:00") == Resolved(3, How.REMEMBERED)
    assert m.resolve("0000:2a:00") == Resolved(4, How.MAPPED)
    # GPUs renumbered: index 3 now belongs to another bus id, so blaming it would be wrong.
    clock.now += 61
    answers.append({"00000000:2a:00.0": 3})
    assert m.resolve("0000:19:00") == Resolved(unmapped_index("0000:19:00"), How.UNMAPPED)


DMESG_T = [
    f"[{WHEN:%a %b} {WHEN.day:2d} {WHEN:%H:%M:%S %Y}] NVRM: GPU at PCI:0000:38:00: "
    "GPU-5f3e0000-0000-0000-0000-000000000000\n",
    f"[{WHEN:%a %b} {WHEN.day:2d} {WHEN:%H:%M:%S %Y}] NVRM: Xid (PCI:0000:38:00): 79, "
    "pid=2211, name=python3, GPU has fallen off the bus.\n",
    f"[{WHEN:%a %b} {WHEN.day:2d} {WHEN:%H:%M:%S %Y}] NVRM: GPU 0000:38:00.0: GPU has fallen "
    "off the bus.\n",
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, Running]]:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"),
                        notify={"route": {"receiver": "record",  # type: ignore[arg-type]
                                          "group_wait_s": 0}})
    app = create_app(settings, clock=ManualClock(T0), schedule=False)
    with TestClient(app) as client:
        yield client, app.state.gpuhealth


def _healthy_node(node: str, gpus: range) -> str:
    return "\n".join(f"gpu,host={node},gpu={g} gpu_temp=55,power_draw=300,ecc_dbe_volatile=0i "
                     f"{NS - 30 * 10**9}" for g in gpus)


def _node(client: TestClient, node: str) -> Any:
    r = client.get("/v1/nodes")
    assert r.status_code == 200, r.text
    return next(n for n in r.json()["nodes"] if n["node"] == node)


def _parse_and_write(client: TestClient, st: Running, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> Any:
    log = tmp_path / "dmesg-T.log"
    log.write_text("".join(DMESG_T))
    assert main(["parse", "kernel-log", str(log), "--host", "n7"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [f"xid,gpu=1014336,host=n7 code=79i {NS - 30 * 10**9}"]
    assert "gpu1014336" in out.err and "not in the GPU map" in out.err
    r = client.post("/write", content=_healthy_node("n7", range(4)) + "\n" + out.out)
    assert r.status_code == 204, r.text
    st.scheduler.score_once()
    return _node(client, "n7")


def test_parse_output_of_an_unmapped_xid_79_fires_the_hard_rule(
        service: tuple[TestClient, Running], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    n7 = _parse_and_write(*service, tmp_path, capsys)
    assert n7["risk"] == 1.0
    assert n7["top_signal"]["entity"] == "n7:gpu1014336"
    assert n7["top_signal"]["rule"] == "xid"


def test_parse_output_of_an_unmapped_xid_79_alerts_its_node(
        service: tuple[TestClient, Running], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    n7 = _parse_and_write(*service, tmp_path, capsys)
    assert n7["level"] == 3


def test_agent_round_delivers_the_xid_of_a_gpu_that_left_the_map(
        service: tuple[TestClient, Running], tmp_path: Path) -> None:
    client, st = service
    log = tmp_path / "kern.log"
    log.write_text("")
    answers = [{"00000000:38:00.0": 2, "00000000:b8:00.0": 5}]
    clock = Clock(T0)
    kernel = KernelLogCollector("n8", FileFollower(log), gpu_index=answers[0],
                                refresh_index=lambda: answers[-1], boot_time=0.0, clock=clock)
    agent = Agent([kernel], Spool(tmp_path / "spool", 1 << 20), None, host="n8",
                  wall_ns=lambda: NS)
    agent.lines()  # the kernel log is followed from its end
    # The GPU falls off: nvidia-smi lists only the other one; a first Xid from another bus id
    # refreshes the map, then the Xid 79 of the lost GPU arrives.
    answers.append({"00000000:b8:00.0": 5})
    with log.open("a") as fh:
        fh.write(DMESG_T[1].replace("0000:38:00", "0000:c1:00").replace(": 79,", ": 31,"))
        fh.writelines(DMESG_T)
    lines = agent.lines()
    assert kernel.status.up, kernel.status.reason
    xids = [x for x in lines if x.startswith("xid,")]
    assert xids == [f"xid,gpu={unmapped_index('0000:c1:00')},host=n8 code=31i "
                    f"{NS - 30 * 10**9}",
                    f"xid,gpu=2,host=n8 code=79i {NS - 30 * 10**9}"]
    assert "left the GPU map" in kernel.status.reason
    body = _healthy_node("n8", range(8)) + "\n" + "\n".join(lines)
    r = client.post("/write", content=body)
    assert r.status_code == 204, r.text
    st.scheduler.score_once()
    n8 = _node(client, "n8")
    assert (n8["risk"], n8["level"]) == (1.0, 3)
    assert n8["top_signal"]["entity"] == "n8:gpu2"


def test_a_collector_that_raises_costs_only_its_own_round(tmp_path: Path) -> None:
    class Broken:
        name = "broken"

        def __init__(self) -> None:
            from collectors.base import CollectorStatus

            self.status = CollectorStatus()

        def collect(self) -> Any:
            raise ValueError("not an entity key: 'n1:gpu0000:38:00'")

    log = tmp_path / "kern.log"
    log.write_text("")
    kernel = KernelLogCollector("n9", FileFollower(log, from_start=True), gpu_index={},
                                boot_time=0.0, clock=Clock(T0))
    log.write_text(DMESG_T[1])
    agent = Agent([Broken(), kernel], Spool(tmp_path / "spool", 1 << 20), None, host="n9",
                  wall_ns=lambda: NS)
    lines = agent.lines()
    broken = lines[0]
    xid = next(x for x in lines if x.startswith("xid,"))
    status = next(x for x in lines if x.startswith("gpuhealth_collector,collector=kernel_log"))
    assert any(x.startswith("node,host=n9 ") and "mce_total=0i" in x for x in lines)
    assert broken.startswith("gpuhealth_collector,collector=broken,host=n9 up=0i")
    assert "collector raised ValueError: not an entity key" in broken
    assert xid.startswith("xid,gpu=1014336,host=n9 code=79i")
    assert status.startswith("gpuhealth_collector,collector=kernel_log,host=n9 up=1i")
