"""Telegraf's next release through the real write endpoint: its nvidia_smi input's clocks-event
flags (`clocks_event_reason_*`, 1/0 integers for schemas v11 to v13) and schema v12's HBM
temperature and thresholds land on the catalog and fire the thermal rule; and its prometheus
input scraping the GPU operator's dcgm-exporter names the node by Telegraf's `host`, never by the
exporter's pod name, which alone is refused with the reason.

The flush is our own capture (tests/collectors/captures/telegraf/), written in the shape the
parsers of influxdata/telegraf pull requests 19407 (schema_v12: temperature_memory and the
temperature_*_threshold fields) and 19455 (schema_v11/v12/v13: clocks_event_reason_* through
common/setters.go SetActiveIfUsed, "Active" 1i, "Not Active" 0i) give it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collectors.catalog import Scope
from collectors.frames import Entity
from service.api.app import create_app
from service.api.state import Running
from service.settings import Settings
from tests.collectors.own_captures import TELEGRAF_NEXT_FLUSH, read
from tests.support.fleet import STEP, T0, ManualClock

POD = "nvidia-dcgm-exporter-7x2kq"
FLAGS = ("applications_clocks_setting", "display_clocks_setting", "gpu_idle",
         "hw_power_brake_slowdown", "hw_slowdown", "hw_thermal_slowdown", "sw_power_cap",
         "sw_thermal_slowdown", "sync_boost")


def flush(t: float) -> str:
    """The captured flush stamped at `t` (seconds)."""
    ns = str(round(t * 1e9))
    return "".join(line.rsplit(" ", 1)[0] + " " + ns + "\n"
                   for line in read(TELEGRAF_NEXT_FLUSH).splitlines())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0 + 1)


@pytest.fixture
def client(settings: Settings, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock, schedule=False)) as c:
        yield c


def _running(client: TestClient) -> Running:
    st: Running = client.app.state.gpuhealth  # type: ignore[attr-defined]
    return st


def latest(client: TestClient, key: str, metric: str) -> float:
    w = _running(client).pipeline.store[Scope.GPU]
    slot = w.slot(Entity.parse(key))
    assert slot is not None, key
    return float(w.last_val[slot, w.col(metric)])


def gauges(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(client.get("/metrics").text)
            for s in f.samples}


def test_the_capture_has_every_flag_the_next_release_emits() -> None:
    smi = [line for line in read(TELEGRAF_NEXT_FLUSH).splitlines()
           if line.startswith("nvidia_smi,")]
    assert len(smi) == 2
    for line in smi:
        fields = dict(f.split("=", 1) for f in line.rsplit(" ", 2)[1].split(","))
        got = {k.removeprefix("clocks_event_reason_"): v for k, v in fields.items()
               if k.startswith("clocks_event_reason_")}
        assert sorted(got) == sorted(FLAGS) and set(got.values()) <= {"0i", "1i"}


def test_the_next_release_flush_feeds_the_throttle_and_hbm_metrics(client: TestClient) -> None:
    r = client.post("/write", params={"db": "telegraf"}, content=flush(T0))
    assert r.status_code == 204, r.text
    g0, g1 = "gpu-node-3:gpu0", "gpu-node-3:gpu1"
    assert (latest(client, g0, "throttle_power"), latest(client, g0, "throttle_thermal"),
            latest(client, g0, "throttle_hw_slowdown")) == (1, 0, 0)
    assert (latest(client, g1, "throttle_power"), latest(client, g1, "throttle_thermal"),
            latest(client, g1, "throttle_hw_slowdown")) == (0, 1, 1)
    # Schema v12's HBM temperature and thresholds (pull request 19407).
    assert latest(client, g1, "mem_temp") == 93 and latest(client, g1, "mem_max_temp") == 95
    assert latest(client, g1, "gpu_slowdown_temp") == 89
    assert latest(client, g1, "gpu_shutdown_temp") == 92
    assert latest(client, g1, "gpu_temp_margin") == 5
    # The dcgm-exporter scrape lands on Telegraf's host, not on the exporter's pod.
    assert latest(client, g1, "pcie_replay") == 3
    nodes = {e.node for e in _running(client).pipeline.store[Scope.GPU].entities}
    assert nodes == {"gpu-node-3"}
    # The flags without a catalog home are ignored and counted, the mapped ones are not.
    counted = {labels: v for (name, labels), v in gauges(client).items()
               if name == "gpuhealth_ignored_fields_total"}
    for flag in FLAGS:
        key = (("field", f"clocks_event_reason_{flag}"), ("measurement", "nvidia_smi"))
        mapped = flag in ("hw_slowdown", "hw_thermal_slowdown", "sw_power_cap")
        assert (key in counted) is not mapped, flag
        if not mapped:
            assert counted[key] == 2


def test_the_flags_fire_the_thermal_rule_below_the_slowdown_temperature(
        client: TestClient, clock: ManualClock) -> None:
    """GPU 1 reads 84 C, under its 89 C slowdown threshold: only Telegraf's
    clocks_event_reason_hw_thermal_slowdown=1i says it is thermally throttled."""
    st = _running(client)
    for _ in range(30):  # thermal_hold_s (60 s) and the policy's for-duration
        r = client.post("/write", content=flush(clock.now))
        assert r.status_code == 204, r.text
        st.scheduler.score_once()
        clock.now += STEP
    rules = {a.entity: {e["rule"] for e in a.explanation}
             for a in st.pipeline.alerts.open_alerts()}
    assert "thermal_slowdown" in rules.get("gpu-node-3:gpu1", set()), rules
    assert "thermal_slowdown" not in rules.get("gpu-node-3:gpu0", set())  # power cap only


def test_a_scrape_named_only_by_the_exporters_pod_is_refused_and_counted(
        client: TestClient) -> None:
    """Telegraf with `omit_hostname = true` scraping the GPU operator's exporter (no NODE_NAME):
    its only name is the pod's. Refused with the reason, counted, no node made; the rest of
    the flush is kept."""
    before = gauges(client).get(("gpuhealth_samples_rejected_total", ()), 0.0)
    ns = round(T0 * 1e9)
    body = "\n".join([
        f"prometheus,Hostname={POD},gpu=0 DCGM_FI_DEV_GPU_TEMP=60,DCGM_FI_DEV_POWER_USAGE=300 "
        f"{ns}",
        f"DCGM_FI_DEV_GPU_TEMP,Hostname={POD},gpu=1 gauge=61 {ns}",
        f"prometheus,Hostname={POD},gpu=2,host=gpu-node-3 DCGM_FI_DEV_GPU_TEMP=62 {ns}",
    ]) + "\n"
    r = client.post("/write", content=body)
    assert r.status_code == 400
    err = r.json()
    assert err["error"].startswith("partial write:") and err["error"].endswith("dropped=2")
    assert [x["line"] for x in err["rejections"]] == [1, 2]
    for x in err["rejections"]:
        assert f"Hostname={POD} is a pod name of the nvidia-dcgm-exporter DaemonSet" in (
            x["reason"]), x
    nodes = {e.node for e in _running(client).pipeline.store[Scope.GPU].entities}
    assert nodes == {"gpu-node-3"}
    assert latest(client, "gpu-node-3:gpu2", "gpu_temp") == 62
    after = gauges(client)[("gpuhealth_samples_rejected_total", ())]
    assert after - before == 2


def test_a_central_scraper_names_nodes_by_hostname_alone(settings: Settings,
                                                          clock: ManualClock) -> None:
    """`ingest.node_name_from: [Hostname]` reaches the write path: the scraper's own host is
    no node, and a pod-named sample is refused rather than put on the scraper."""
    s = settings.model_copy(update={"ingest": settings.ingest.model_copy(
        update={"node_name_from": ["Hostname"]})})
    ns = round(T0 * 1e9)
    body = (f"prometheus,Hostname=gpu-node-7,gpu=0,host=scraper DCGM_FI_DEV_GPU_TEMP=55 {ns}\n"
            f"prometheus,Hostname={POD},gpu=1,host=scraper DCGM_FI_DEV_GPU_TEMP=56 {ns}\n")
    with TestClient(create_app(s, clock=clock, schedule=False)) as c:
        r = c.post("/write", content=body)
        assert r.status_code == 400 and [x["line"] for x in r.json()["rejections"]] == [2]
        assert {e.key for e in _running(c).pipeline.store[Scope.GPU].entities} == {
            "gpu-node-7:gpu0"}


def test_the_setting_needs_a_label() -> None:
    with pytest.raises(ValueError, match="node_name_from"):
        Settings.model_validate({"ingest": {"node_name_from": []}})
