"""The documented PromQL joins (docs/metrics.md, "The board of a GPU"), on a real Prometheus
scraping both the service and a dcgm-exporter page of the GPU operator's shape (its Hostname
is the exporter's pod name): gpuhealth_gpu_info names the board of each risk series with
dcgm-exporter's label names, and `on(UUID)` lays gpuhealth's node names onto dcgm-exporter's
series, whatever that exporter calls its host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from service.api.app import create_app
from service.settings import Settings
from tests.collectors.own_captures import TELEGRAF_NEXT_FLUSH, read
from tests.console.serve import serving
from tests.notify.receivers.servers import HttpRecorder, Reply
from tests.support.fleet import STEP, T0, ManualClock
from tests.support.prometheus import PROMETHEUS, PrometheusServer

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus is not installed (apt-get install prometheus; .ci/run does)")]

UUIDS = ("GPU-5b1e7c2a-93d4-4f0e-a1b2-0c3d4e5f6a70", "GPU-5b1e7c2a-93d4-4f0e-a1b2-0c3d4e5f6a71")
POD = "nvidia-dcgm-exporter-7x2kq"


def dcgm_page() -> str:
    """The same two GPUs as dcgm-exporter under the GPU operator shows them."""
    lines = ["# HELP DCGM_FI_DEV_PCIE_REPLAY_COUNTER Total number of PCIe retries.",
             "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter"]
    for gpu, (uuid, bus) in enumerate(zip(UUIDS, ("00000000:12:00.0", "00000000:24:00.0"),
                                          strict=True)):
        lines.append(f'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{gpu="{gpu}",UUID="{uuid}",'
                     f'pci_bus_id="{bus}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB '
                     f'HBM3",Hostname="{POD}",DCGM_FI_DRIVER_VERSION="550.90.07"}} {gpu * 3}')
    return "\n".join(lines) + "\n"


def fed(url: str, app: FastAPI, clock: ManualClock) -> None:
    """Two Telegraf flushes written to the served app, each scored by hand."""
    st = app.state.gpuhealth
    for k in range(2):
        clock.now = T0 + k * STEP + 1
        ns = str(round((T0 + k * STEP) * 1e9))
        body = "".join(line.rsplit(" ", 1)[0] + " " + ns + "\n"
                       for line in read(TELEGRAF_NEXT_FLUSH).splitlines())
        r = httpx.post(f"{url}/write", params={"db": "telegraf"}, content=body, timeout=30)
        assert r.status_code == 204, r.text
        st.scheduler.score_once()


@pytest.fixture
def prom(settings: Settings, tmp_path: Path) -> Iterator[PrometheusServer]:
    clock = ManualClock(T0 + 1)
    app = create_app(settings, clock=clock, schedule=False)
    with serving(app) as url, HttpRecorder(default=Reply(200, dcgm_page())) as dcgm:
        fed(url, app, clock)
        server = PrometheusServer(tmp_path / "prometheus",
                                  [url.removeprefix("http://"), dcgm.url.removeprefix("http://")],
                                  [])
        server.start()
        try:
            yield server
        finally:
            server.stop()


def test_the_documented_joins_name_the_board_and_the_node(prom: PrometheusServer) -> None:
    # The risk of each GPU with its board (the first join of docs/prometheus.md).
    joined = prom.wait_for("risk joined with its board", lambda: prom.query(
        "gpuhealth_gpu_risk * on(node, gpu) group_left(UUID, modelName, serial) "
        "gpuhealth_gpu_info"))
    got = {(r["metric"]["node"], r["metric"]["gpu"]): r["metric"] for r in joined}
    assert set(got) == {("gpu-node-3", "0"), ("gpu-node-3", "1")}
    assert got["gpu-node-3", "0"]["UUID"] == UUIDS[0]
    assert got["gpu-node-3", "0"]["modelName"] == "NVIDIA H100 80GB HBM3"
    assert got["gpu-node-3", "1"]["serial"] == "1654922031231"
    # dcgm-exporter's series on gpuhealth's node names (its Hostname is the pod's).
    dcgm = prom.wait_for("dcgm-exporter's series on our node names", lambda: prom.query(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER * on(UUID) group_left(node, serial) "
        "gpuhealth_gpu_info"))
    assert sorted((r["metric"]["Hostname"], r["metric"]["node"], r["metric"]["serial"],
                   r["value"][1]) for r in dcgm) == [
        (POD, "gpu-node-3", "1654922031230", "0"), (POD, "gpu-node-3", "1654922031231", "3")]
