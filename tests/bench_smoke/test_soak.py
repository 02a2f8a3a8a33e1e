"""The soak harness's short form, end to end: the real stack (influxd, Alertmanager, the service,
node agents, Telegraf-shaped pushes, the loopback receiver) through the whole fault schedule and
its storm phase and its level-2 faults (a power supply, a fan, a PCIe link, read through the
agents' ipmi and nvidia-smi sources) in three minutes of real time, and every invariant of
docs/soak.md holding.
The harness's exit status is what is asserted; each broken invariant is named with its
figures."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from bench.soak_plan import build
from tests.notify.alertmanager_server import ALERTMANAGER
from tests.support.bench_run import run_bench

REPO = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 1200  # a hung stack fails the test instead of blocking the suite


@pytest.mark.slow  # about four minutes of wall time
@pytest.mark.skipif(shutil.which("influxd") is None,
                    reason="influxd is not installed (Debian: apt-get install influxdb)")
@pytest.mark.skipif(ALERTMANAGER is None, reason="prometheus-alertmanager is not installed "
                                                 "(apt-get install prometheus-alertmanager)")
def test_short_soak_holds_every_invariant(tmp_path: Path) -> None:
    proc = run_bench(
        [sys.executable, "-m", "bench.soak", "--minutes", "3", "--gpus", "16", "--json",
         "--dir", str(tmp_path / "soak")],
        REPO, HANG_GUARD_S)
    assert proc.returncode in (0, 1), f"the stack did not run:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout)
    names = {c["name"] for c in report["invariants"]}
    for expected in ("scoring ticks failed", "readiness == could score", "pages: duplicates",
                     "pages: lost resolves", "samples lost in InfluxDB",
                     "samples doubled in InfluxDB", "refused beyond the bad lines",
                     "bad lines refused", "drains only of known nodes",
                     "resolves after the kill -9 delivered", "RSS flat (last/first quarter)",
                     "tick time flat (last/first quarter)", "storm: FleetStorm raised",
                     "level 3 in Alertmanager while firing",
                     "resolved in Alertmanager while firing", "pages: every hard fault (grouped)",
                     "delivery column == receivers' logs", "drains: none for a level-2 fault"):
        assert expected in names, f"the report lacks the invariant {expected!r}"
    plan = build(3, 16)
    assert sum(n.startswith("level 3 within") for n in names) == len(plan.failures)
    assert sum(n.startswith("alerted before it happened") for n in names) == sum(
        f.precursor for f in plan.failures)
    # The supply failure (and the redundancy it takes), the slowing fan, the narrowed link.
    assert len(plan.level2) == 4
    assert sum(n.startswith("level 2 within") for n in names) == len(plan.level2)
    assert sum(n.startswith("level 2 to mail and Alertmanager") for n in names) == len(
        plan.level2)
    broken = [f"{c['name']}: {c['value']} ({c['detail']})" for c in report["invariants"]
              if c["judged"] and not c["ok"]]
    assert not broken, "invariants broken:\n  " + "\n  ".join(broken)
    assert proc.returncode == 0
