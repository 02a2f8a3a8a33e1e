"""The rules shipped in dashboards/prometheus/: `promtool check rules` accepts them and
`promtool test rules` passes their unit tests (Debian's prometheus package provides promtool),
among them the dead-man's switch firing once the service's series vanish. The checks can fail:
a rule over a metric the service no longer exports is caught too. And one path per alert: no
rule duplicates an alert gpuhealth's receiver posts, every rule links its runbook, and
docs/alertmanager.md's table of paths and its receiver-shaped rule agree with both."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.catalog import Scope
from service.notify.labels import alert_labels
from service.notify.runbooks import RUNBOOKS
from service.runtime.entity_metrics import GAUGES
from service.stages.alert_store import ALERTNAMES, Alert
from service.stages.fleet_alerts import DERIVED
from tests.support.prometheus import PROMTOOL, REPO, RULES_DIR

RULES = RULES_DIR / "rules.yml"
UNIT_TESTS = RULES_DIR / "rules_test.yml"
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus; .ci/run does)")


def _promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, check=False)


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = _promtool("test", "rules", UNIT_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_a_broken_rule_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n"
                   "        expr: gpuhealth_gpu_alert_level >=\n")
    done = _promtool("check", "rules", str(bad), cwd=tmp_path)
    assert done.returncode != 0


def test_the_rules_use_only_metrics_the_service_exports() -> None:
    """Every gpuhealth_* name in an expression is one /metrics has (a rename would otherwise
    leave a rule silently matching nothing)."""
    exported = {g.name for g in GAUGES} | {
        "gpuhealth_notifications_failed_total", "gpuhealth_remediation_breaker_open",
        "gpuhealth_collector_up", "gpuhealth_score_ticks_total"}
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    used = set()
    for g in groups:
        for r in g["rules"]:
            # Names after a colon are recording rules' own (job:gpuhealth_x:max).
            used |= set(re.findall(r"(?<![:\w])gpuhealth_\w+", r["expr"]))
    assert used and used <= exported, used - exported
    levels = {n for n in used if n.endswith("_alert_level")}
    assert levels == {"gpuhealth_gpu_alert_level", "gpuhealth_gpu_nvlink_alert_level",
                      "gpuhealth_ib_port_alert_level", "gpuhealth_node_alert_level"}


# ---- one path per alert, runbooks, the dead-man's switch ---------------------------------------

PLACEHOLDER = "https://gpuhealth.example.com"  # operators replace it (docs/alertmanager.md)
DOC = REPO / "docs" / "alertmanager.md"
# Every alertname gpuhealth's own receivers carry (ModelRetraining: service/runtime/retrain.py).
GPUHEALTH_NAMES = {*ALERTNAMES.values(), *DERIVED, "ModelRetraining"}


def alert_rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_one_path_per_alert() -> None:
    """gpuhealth's own alerts reach Alertmanager from its receiver only: no rule raises one
    of them, or any alert from the per-entity gauges (a second page for the same fault)."""
    rules = alert_rules()
    assert not GPUHEALTH_NAMES & set(rules)
    entity_gauges = {g.name for g in GAUGES}
    for name, r in rules.items():
        assert not entity_gauges & set(re.findall(r"gpuhealth_\w+", r["expr"])), name


def test_every_alert_links_its_runbook() -> None:
    rules = alert_rules()
    for name, r in rules.items():
        assert r["annotations"]["runbook_url"] == f"{PLACEHOLDER}/v1/runbooks/{name}", name
    assert {n for n, b in RUNBOOKS.items() if b.source == "prometheus"} == set(rules)
    assert {n for n, b in RUNBOOKS.items() if b.source == "gpuhealth"} == GPUHEALTH_NAMES


def test_the_dead_mans_switch_is_there() -> None:
    rules = alert_rules()
    watchdog = rules["GpuHealthWatchdog"]
    assert watchdog["expr"] == "vector(1)" and "for" not in watchdog
    assert watchdog["labels"] == {"severity": "none"}
    for name in ("GpuHealthDown", "GpuHealthAbsent", "GpuHealthMetricsAbsent"):
        assert 'job="gpuhealth"' in rules[name]["expr"] and rules[name]["for"], name
        assert rules[name]["labels"]["severity"] == "critical"
    assert "absent(up{" in rules["GpuHealthAbsent"]["expr"]
    assert "gpuhealth_score_ticks_total" in rules["GpuHealthMetricsAbsent"]["expr"]


def test_the_unit_tests_show_every_alert_firing_and_the_dead_mans_quiet() -> None:
    """rules_test.yml fires every alert at least once, and shows each dead-service alert
    not firing too (while the service's series are there)."""
    fired: set[str] = set()
    quiet: set[str] = set()
    for t in yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]:
        for case in t.get("alert_rule_test", []):
            (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    assert fired == set(alert_rules())
    assert {"GpuHealthDown", "GpuHealthAbsent", "GpuHealthMetricsAbsent"} <= quiet


def test_the_documented_alert_table_says_each_alerts_path() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.MULTILINE)
    path = {name: by.strip() for name, by in rows if by.strip() != "Raised by"}
    assert set(path) == set(RUNBOOKS)
    for name, by in path.items():
        if RUNBOOKS[name].source == "gpuhealth":
            assert by.startswith("gpuhealth's receiver"), name
        else:
            assert by == "the Prometheus rules", name


def documented_rules() -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"```yaml\n(.*?)```", text[text.index("<!-- prometheus rules:"):],
                      re.DOTALL)
    assert found is not None
    return found.group(1)


@needs_promtool
def test_the_documented_receiver_shaped_rule_gives_the_receivers_labels(tmp_path: Path) -> None:
    """For a shop without the receiver: the page's rule names and labels an alert as the
    receiver does, but for `cluster` (a target label there) and `fingerprint`, and keeps
    `job` and `instance`, which the page says to drop."""
    (tmp_path / "rules.yml").write_text(documented_rules(), encoding="utf-8")
    a = Alert(1, "n001:gpu3", Scope.GPU, "n001", 3, 3, "firing", 1.0, 0.0, 0.0, None, [])
    labels = {k: v for k, v in alert_labels(a, "c").items() if k not in ("cluster",)}
    labels |= {"job": "gpuhealth", "instance": "gh:8080"}
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": 'gpuhealth_gpu_alert_level{job="gpuhealth",'
                                    'instance="gh:8080",node="n001",gpu="3"}',
                          "values": "3 3"}],
        "alert_rule_test": [{"alertname": "GpuFailureRisk", "eval_time": "1m", "exp_alerts": [{
            "exp_labels": labels,
            "exp_annotations": {"runbook_url": f"{PLACEHOLDER}/v1/runbooks/GpuFailureRisk"},
        }]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test), encoding="utf-8")
    assert _promtool("check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    done = _promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
