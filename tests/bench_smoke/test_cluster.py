"""bench.cluster at its smallest, end to end with real processes: PostgreSQL, influxd, an HA
pair whose leader is killed with SIGKILL mid-incident once, then two shards with a static map,
and every invariant holding (no duplicate page, no lost resolve, every injected failure paged,
no action run twice, the breaker intact, the lease taken over, every sample stored once, every
node on its owner shard). The harness's exit status and report are what is asserted."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.postgres import INITDB, MISSING, POSTGRES
from tests.support.bench_run import run_bench

REPO = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 600  # a hung stack fails the test instead of blocking the suite
EXPECTED = ("failovers completed", "lease taken over within 30 s",
            "first notification after the kill", "breaker state intact across the kill",
            "leader epoch rose each round", "each node on its owner shard only",
            "wrong-shard pushes redirected", "pages: duplicates", "pages: lost resolves",
            "every injected hard failure paged", "remediation actions run twice",
            "samples lost in InfluxDB", "samples doubled in InfluxDB")


@pytest.mark.slow  # about 90 s of wall time
@pytest.mark.skipif(shutil.which("influxd") is None,
                    reason="influxd is not installed (Debian: apt-get install influxdb)")
@pytest.mark.skipif(POSTGRES is None or INITDB is None, reason=MISSING)
def test_tiny_cluster_run_holds_every_invariant(tmp_path: Path) -> None:
    proc = run_bench(
        [sys.executable, "-m", "bench.cluster", "--failovers", "1", "--no-starting-round",
         "--no-partition-round", "--ha-nodes", "2", "--shards", "2", "--nodes", "4", "--gpus",
         "2", "--rounds", "2", "--lease-ttl", "3", "--lease-renew", "1", "--resolve-s", "6",
         "--no-add-shard", "--json",
         "--dir", str(tmp_path / "run")],
        REPO, HANG_GUARD_S)
    assert proc.returncode in (0, 1), f"the stack did not run:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout)
    names = {c["name"] for c in report["invariants"]}
    for expected in EXPECTED:
        assert expected in names, f"the report lacks the invariant {expected!r}"
    broken = [f"{c['name']}: {c['value']} ({c['detail']})" for c in report["invariants"]
              if c["judged"] and not c["ok"]]
    assert not broken, "invariants broken:\n  " + "\n  ".join(broken)
    fo, sh = report["info"]["failover"], report["info"]["sharded"]
    assert fo["rounds"] == 1 and fo["lease_s"]["max"] is not None
    assert set(sh["shards"]) == {"a", "b"}
    assert sum(d["nodes_owned"] for d in sh["shards"].values()) == 4
    assert proc.returncode == 0
