"""The Alertmanager configuration docs/alertmanager.md recommends, taken from the page itself:
Debian's `amtool check-config` accepts it, and a real Alertmanager running it inhibits as the
page says. Our alerts are posted with the labels the `alertmanager` receiver gives them
(service.notify.refs and the receiver's body), so a renamed label or scope fails here too:
a node-level alert mutes its node's alerts of its own severity or lower and never a higher
one, a fleet storm mutes its cluster's per-node critical pages and nothing of Prometheus's."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from collectors.catalog import Scope
from service.notify.receivers.alertmanager import am_alert
from service.notify.refs import ref_of
from service.stages.alert_store import Alert
from tests.notify.alertmanager_server import ALERTMANAGER, AlertmanagerServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "alertmanager.md"
AMTOOL = shutil.which("amtool")
MARKER = "<!-- alertmanager.yml:"


def doc_config() -> str:
    """The yaml block that follows the marker comment on the page."""
    text = DOC.read_text(encoding="utf-8")
    at = text.index(MARKER)
    found = re.search(r"```yaml\n(.*?)```", text[at:], re.DOTALL)
    assert found is not None, "no yaml block after the marker"
    return found.group(1)


def test_the_page_recommends_one_inhibit_rule_per_source_severity() -> None:
    rules = yaml.safe_load(doc_config())["inhibit_rules"]
    node = [r for r in rules if "scope=\"node\"" in r["source_matchers"]]
    sources = sorted(m for r in node for m in r["source_matchers"] if m.startswith("severity"))
    assert sources == ['severity="critical"', 'severity="info"', 'severity="warning"']
    # No rule lets a node-level source mute whatever severity it likes, but the critical one.
    for r in node:
        if 'severity="critical"' not in r["source_matchers"]:
            assert any(m.startswith("severity") for m in r["target_matchers"]), r


@pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed "
                    "(apt-get install prometheus-alertmanager; .ci/run does)")
def test_amtool_accepts_the_documented_config_and_its_routes(tmp_path: Path) -> None:
    assert AMTOOL is not None
    conf = tmp_path / "alertmanager.yml"
    conf.write_text(doc_config(), encoding="utf-8")
    done = subprocess.run([AMTOOL, "check-config", str(conf)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    # The watchdog goes to the dead-man's switch alone, criticals (ours or Prometheus's) page.
    for labels, receiver in ((["alertname=GpuHealthWatchdog", "severity=none"],
                              "deadmans-switch"),
                             (["alertname=GpuHealthDown", "severity=critical"], "gpu-pager"),
                             (["alertname=GpuFailureRisk", "severity=critical"], "gpu-pager"),
                             (["alertname=NodeNoData", "severity=warning"], "gpu-ops")):
        done = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={conf}",
                               f"--verify.receivers={receiver}", *labels],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, (labels, done.stdout + done.stderr)
    # It can fail: a matcher Alertmanager cannot parse is refused.
    conf.write_text(doc_config().replace('severity="info"', 'severity=="info'), encoding="utf-8")
    done = subprocess.run([AMTOOL, "check-config", str(conf)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0


@pytest.fixture
def am(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    if ALERTMANAGER is None:
        pytest.skip("prometheus-alertmanager is not installed "
                    "(apt-get install prometheus-alertmanager; .ci/run does)")
    srv = AlertmanagerServer(tmp_path / "alertmanager")
    srv.conf.write_text(doc_config(), encoding="utf-8")
    srv.start()
    yield srv
    srv.stop()


_IDS = iter(range(1, 1000))


def ours(cluster: str, entity: str, scope: Scope, node: str, level: int,
         alertname: str = "") -> dict[str, Any]:
    """A firing alert of ours, as the alertmanager receiver posts it."""
    now = time.time()
    a = Alert(next(_IDS), entity, scope, node, level, level, "firing", 0.9, now - 60, now,
              None, [], alertname)
    return am_alert(ref_of(a, cluster, "http://gpuhealth.test"), now, 300.0)


def prometheus(labels: dict[str, str]) -> dict[str, Any]:
    """A firing alert as Prometheus posts one from the shipped rules."""
    now = time.time()
    return {"labels": labels, "annotations": {}, "startsAt": _rfc3339(now - 60),
            "endsAt": _rfc3339(now + 300)}


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def test_a_live_alertmanager_inhibits_as_the_page_says(am: AlertmanagerServer) -> None:
    gpu, nvl, node = Scope.GPU, Scope.NVLINK, Scope.NODE
    posted = {
        # Cluster a: node-level sources of each severity and their nodes' alerts.
        "nodata-n1": ours("a", "n1", node, "n1", 2, "NodeNoData"),
        "dbe-n1": ours("a", "n1:gpu3", gpu, "n1", 3),  # critical under a warning: pages
        "warn-n1": ours("a", "n1:gpu5", gpu, "n1", 2),
        "info-n1": ours("a", "n1:gpu1:nvlink2", nvl, "n1", 1),
        "warn-n2": ours("a", "n2:gpu0", gpu, "n2", 2),  # another node
        "node-n3": ours("a", "n3", node, "n3", 3, "NodeNoData"),
        "dbe-n3": ours("a", "n3:gpu0", gpu, "n3", 3),
        "node-n4": ours("a", "n4", node, "n4", 1, "NodeNoData"),
        # A node's own sensors (a host memory error) mute none of its GPUs' alerts.
        "risk-n5": ours("a", "n5", node, "n5", 3, "NodeAtRisk"),
        "dbe-n5": ours("a", "n5:gpu0", gpu, "n5", 3),
        "warn-n5": ours("a", "n5:gpu1", gpu, "n5", 2),
        "warn-n4": ours("a", "n4:gpu0", gpu, "n4", 2),
        "info-n4": ours("a", "n4:gpu1", gpu, "n4", 1),
        # Cluster b: a storm.
        "storm": ours("b", "fleet", node, "*", 3, "FleetStorm"),
        "dbe-m1": ours("b", "m1:gpu0", gpu, "m1", 3),
        "warn-m1": ours("b", "m1:gpu1", gpu, "m1", 2),
        "missing-m2": ours("b", "m2:gpu4", gpu, "m2", 2, "GpuMissing"),
        "down": prometheus({"alertname": "GpuHealthDown", "cluster": "b", "job": "gpuhealth",
                            "instance": "gh:8080", "severity": "critical"}),
        "watchdog": prometheus({"alertname": "GpuHealthWatchdog", "severity": "none"}),
    }
    muted_by = {"warn-n1": "nodata-n1", "info-n1": "nodata-n1", "dbe-n3": "node-n3",
                "info-n4": "node-n4", "dbe-m1": "storm"}
    r = httpx.post(f"{am.url}/api/v2/alerts", json=list(posted.values()), timeout=10)
    r.raise_for_status()
    key = {tuple(sorted(a["labels"].items())): name for name, a in posted.items()}

    def seen() -> tuple[dict[str, tuple[str, list[str]]], dict[str, str]]:
        """Each posted alert's state and inhibiting fingerprints, and its fingerprint, as
        Alertmanager reports them."""
        state, fps = {}, {}
        for a in am.alerts():
            name = key[tuple(sorted(a["labels"].items()))]
            state[name] = (a["status"]["state"], a["status"]["inhibitedBy"])
            fps[name] = a["fingerprint"]
        return state, fps

    # Alertmanager recomputes inhibition on each read; its source cache fills within moments
    # of the post, so poll until the answer settles (the deadline bounds a hang).
    deadline = time.monotonic() + 30
    while True:
        state, fps = seen()
        want = {n: ("suppressed", [fps[muted_by[n]]]) if n in muted_by else ("active", [])
                for n in posted} if set(fps) == set(posted) else {}
        if state == want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state == want
