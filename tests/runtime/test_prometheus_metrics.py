"""/metrics per entity: risk and alert level per GPU, IB port and node, NVLink folded into its
GPU under the worst link's name; series of entities the service forgot leave the exposition;
a failing receiver is labelled on its counter; the breaker is a gauge; the live exposition of
a service that scored failures passes `promtool check metrics` (Debian's prometheus)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collectors.catalog import Scope
from service.api.app import create_app
from service.runtime.entity_metrics import GAUGES, GPU_INFO, series_count
from service.settings import Settings, StorageSettings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

PROMTOOL = shutil.which("promtool")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
ENTITY_FAMILIES = {g.name for g in GAUGES}


class Svc:
    def __init__(self, client: TestClient, fleet: Fleet, clock: ManualClock) -> None:
        app = client.app
        self.client, self.fleet, self.clock = client, fleet, clock
        self.st = app.state.gpuhealth  # type: ignore[attr-defined]
        self.collector: FleetCollector = self.st.collectors[0]

    def round(self) -> None:
        self.st.scheduler.collect_once("fleet")
        self.st.scheduler.score_once()
        self.clock.now += STEP

    def text(self) -> str:
        r = self.client.get("/metrics")
        assert r.status_code == 200
        return r.text

    def samples(self) -> Samples:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(self.text()) for s in fam.samples}


def _service(settings: Settings) -> Iterator[Svc]:
    fleet = Fleet({"n001": 8, "n002": 8, "n003": 4})
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        yield Svc(client, fleet, clock)


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    yield from _service(settings)


def _break(svc: Svc) -> None:
    """Two healthy rounds, then a double-bit ECC error and a dead link on n001:gpu3 and
    retired pages past DCGM's soft limit on n002:gpu5."""
    for _ in range(2):
        svc.round()
    svc.fleet.set("n001:gpu3", "ecc_dbe_volatile", 2)
    svc.fleet.set("n001:gpu3:nvlink1", "nvlink_state", 0)
    svc.fleet.set("n002:gpu5", "retired_pages_sbe", 20)
    svc.round()


def _of(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def test_nothing_per_entity_before_the_first_tick(svc: Svc) -> None:
    assert not ENTITY_FAMILIES & {n for n, _ in svc.samples()}


def test_risk_and_level_per_gpu_link_port_and_node(svc: Svc) -> None:
    _break(svc)
    s = svc.samples()

    def v(name: str, **labels: str) -> float:
        return s[(name, tuple(sorted(labels.items())))]

    assert v("gpuhealth_gpu_risk", node="n001", gpu="3") == 1.0
    assert v("gpuhealth_gpu_alert_level", node="n001", gpu="3") == 3
    assert 0 < v("gpuhealth_gpu_risk", node="n002", gpu="5") < 1
    assert v("gpuhealth_gpu_alert_level", node="n002", gpu="5") == 1
    assert v("gpuhealth_gpu_risk", node="n003", gpu="0") == 0
    assert v("gpuhealth_gpu_alert_level", node="n003", gpu="0") == 0
    # The dead link names its GPU's NVLink series; a healthy GPU's names its first link.
    assert v("gpuhealth_gpu_nvlink_risk", node="n001", gpu="3", link="1") == 1.0
    assert v("gpuhealth_gpu_nvlink_alert_level", node="n001", gpu="3", link="1") == 3
    assert v("gpuhealth_gpu_nvlink_risk", node="n001", gpu="2", link="0") == 0
    assert [dict(lbl)["link"] for lbl in _of(s, "gpuhealth_gpu_nvlink_risk")
            if dict(lbl)["gpu"] == "3" and dict(lbl)["node"] == "n001"] == ["1"]
    assert v("gpuhealth_ib_port_risk", node="n001", device="mlx5_1", port="1") == 0
    assert v("gpuhealth_ib_port_alert_level", node="n002", device="mlx5_0", port="1") == 0
    assert (v("gpuhealth_node_risk", node="n001"), v("gpuhealth_node_alert_level", node="n001")) \
        == (1.0, 3)
    assert v("gpuhealth_node_alert_level", node="n002") == 1
    assert (v("gpuhealth_node_risk", node="n003"), v("gpuhealth_node_alert_level", node="n003")) \
        == (0, 0)
    # What the API says, /metrics says.
    body = svc.client.get("/v1/nodes/n002").json()
    gpu5 = next(g for g in body["gpus"] if g["entity"] == "n002:gpu5")
    assert v("gpuhealth_gpu_risk", node="n002", gpu="5") == pytest.approx(gpu5["risk"], abs=1e-6)


def test_series_count_is_what_the_docs_state(svc: Svc) -> None:
    _break(svc)
    names = [n for n, _ in svc.samples() if n in ENTITY_FAMILIES]
    # 20 GPUs, each with links; 2 ports on each of 3 nodes.
    assert len(names) == series_count(gpus=20, gpus_with_nvlink=20, ports=6, nodes=3) == 98
    # No supplies or fans report in this fleet: their families are empty.
    assert all(names.count(g.name) in ((0,) if g.per in ("power supply", "fan") else (20, 6, 3))
               for g in GAUGES)


def test_scrapes_between_ticks_reuse_one_build(svc: Svc) -> None:
    _break(svc)
    first = list(svc.st.metrics.entities.collect())
    assert [m.name for m in first] == [g.name for g in GAUGES] + [GPU_INFO.name]
    assert all(a is b for a, b in zip(first, svc.st.metrics.entities.collect(), strict=True))
    svc.round()
    assert all(a is not b for a, b in zip(first, svc.st.metrics.entities.collect(),
                                          strict=True))


def test_forgotten_entities_leave_the_exposition(svc: Svc) -> None:
    _break(svc)
    assert ("gpuhealth_node_risk", (("node", "n003"),)) in svc.samples()
    # n003 is decommissioned and n004 arrives; a week and a day later n003 is forgotten.
    svc.collector.fleet = Fleet({"n001": 8, "n002": 8, "n004": 2})
    svc.clock.now += 8 * 86400
    svc.round()
    s = svc.samples()
    nodes = {dict(lbl).get("node") for n, lbl in s if n in ENTITY_FAMILIES}
    assert nodes == {"n001", "n002", "n004"}
    assert len(_of(s, "gpuhealth_gpu_risk")) == 18
    assert svc.st.pipeline.store[Scope.GPU].forgotten_total == 4


@pytest.mark.slow
def test_a_failing_receiver_is_labelled_on_its_counter(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: every send is refused
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"), notify={
        "receivers": [{"name": "ops-hook", "type": "webhook",
                       "config": {"url": f"http://127.0.0.1:{dead}/hook"}}],
        "route": {"receiver": "record", "group_wait_s": 0, "group_interval_s": 0.5,
                  "routes": [{"receiver": "ops-hook", "continue": True},
                             {"receiver": "record"}]},
        "retry_initial_s": 0.1})
    for svc in _service(settings):
        before = svc.samples()
        key = (("integration", "webhook"), ("receiver", "ops-hook"))
        # Listed at 0 from the start, so a rate over it exists before the first failure.
        assert _of(before, "gpuhealth_notifications_failed_total")[key] == 0
        _break(svc)
        note = svc.st.pipeline.notification
        assert note is not None and note.sender.wait(30)
        s = svc.samples()
        failed = _of(s, "gpuhealth_notifications_failed_total")
        sent = _of(s, "gpuhealth_notifications_sent_total")
        assert failed[key] >= 1 and sent[key] == 0
        record = (("integration", "record"), ("receiver", "record"))
        assert sent[record] >= 1 and failed[record] == 0


def test_the_breaker_is_a_gauge(svc: Svc) -> None:
    assert svc.samples()[("gpuhealth_remediation_breaker_open", ())] == 0
    ctl = svc.st.pipeline.controller
    assert ctl is not None  # remediation defaults to dry_run
    ctl.breaker.trip("test storm", T0)
    assert svc.samples()[("gpuhealth_remediation_breaker_open", ())] == 1


def test_no_breaker_gauge_with_remediation_off(tmp_path: Path) -> None:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"),
                        remediation={"mode": "off"})  # type: ignore[arg-type]
    for svc in _service(settings):
        assert not any(n == "gpuhealth_remediation_breaker_open" for n, _ in svc.samples())


@pytest.mark.skipif(PROMTOOL is None,
                    reason="promtool is not installed (apt-get install prometheus; .ci/run does)")
def test_promtool_accepts_the_live_exposition(svc: Svc) -> None:
    _break(svc)
    note = svc.st.pipeline.notification
    assert note is not None and note.sender.wait(10)
    text = svc.text()
    assert "gpuhealth_gpu_risk{" in text and "gpuhealth_resets_detected_total" in text
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(PROMTOOL is None,
                    reason="promtool is not installed (apt-get install prometheus; .ci/run does)")
def test_promtool_would_catch_a_type_in_a_name() -> None:
    """The check above can fail: the name the service used to export is refused."""
    assert PROMTOOL is not None
    old = ("# HELP gpuhealth_counter_resets_total Counter resets detected\n"
           "# TYPE gpuhealth_counter_resets_total counter\n"
           "gpuhealth_counter_resets_total 0.0\n")
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=old, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0 and "counter" in done.stdout + done.stderr
