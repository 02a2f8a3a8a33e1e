"""The example rules shipped in dashboards/prometheus/: `promtool check rules` accepts them and
`promtool test rules` passes their unit tests (Debian's prometheus package provides promtool).
The checks can fail: a rule over a metric the service no longer exports is caught too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from service.runtime.entity_metrics import GAUGES
from tests.service.prometheus import PROMTOOL, RULES_DIR

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
