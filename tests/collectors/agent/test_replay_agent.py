"""`gpuhealth agent --replay`: a trace pushed like a live agent's rounds, to the real service on
loopback, its timestamps moved to now with --rebase-now."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest

from collectors.catalog import Scope
from service.commands.cli import main
from service.history.samples_read import samples
from tests.collectors.agent.test_agent import Service, _free_port

T0 = 1_700_000_000  # the trace's own time: years before the test runs
NS = 10**9


def _trace(tmp_path: Path, rounds: int) -> Path:
    path = tmp_path / "trace.lp"
    lines = [f"gpu,host=n1,gpu={g} gpu_temp={40 + k},ecc_sbe_volatile={k}i {(T0 + 5 * k) * NS}"
             for k in range(rounds) for g in (0, 1)]
    lines.append(f"xid,host=n1,gpu=1 code=79i {(T0 + 5 * (rounds - 1)) * NS}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_rebased_replay_reaches_the_service_stamped_as_if_live(tmp_path: Path) -> None:
    port = _free_port()
    trace = _trace(tmp_path, 12)  # 55 s of rounds
    before = time.time()
    with Service(tmp_path / "svc", port, clock=time.time):  # ingests at the wall clock
        rc = main(["--log-level", "WARNING", "agent", "--replay", str(trace), "--rebase-now",
                   "--backfill-s", "120", "--url", f"http://127.0.0.1:{port}/write",
                   "--spool", str(tmp_path / "spool")])
    after = time.time()
    assert rc == 0
    assert not list((tmp_path / "spool").glob("*")), "the finished replay left its spool behind"
    db = sqlite3.connect(tmp_path / "svc" / "gpuhealth.db")
    # Rows are written change-only: the store's reader rebuilds every sample.
    rows = [(e, ts, v[0]) for e in ("n1:gpu0", "n1:gpu1")
            for ts, v in samples(db, Scope.GPU, e, "n1", 0.0, math.inf, ["gpu_temp"])]
    ts = sorted({t for _, t, _ in rows})
    start = math.floor((before - 120) / 5) * 5
    assert len(rows) == 24 and len(ts) == 12
    assert start <= ts[0] <= after - 120 and ts == [ts[0] + 5 * k for k in range(12)]
    assert ts[-1] <= after  # the whole trace lay in the past: nothing from the future
    assert [temp for e, _, temp in rows if e == "n1:gpu0"] == [40.0 + k for k in range(12)]
    (xid_ts,) = db.execute("SELECT ts FROM events WHERE metric = 'xid'").fetchone()
    assert xid_ts == ts[-1]


def test_stdout_prints_the_rebased_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    trace = _trace(tmp_path, 3)
    now = time.time()
    assert main(["agent", "--replay", str(trace), "--rebase-now", "--backfill-s", "60",
                 "--stdout", "--spool", str(tmp_path / "spool")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Each round also reports the collector (at the wall clock's time, not the trace's).
    status = [ln for ln in lines if ln.startswith("gpuhealth_collector,")]
    stamps = [int(ln.rsplit(" ", 1)[1]) / NS for ln in lines if ln not in status]
    assert len(stamps) == 7  # 3 rounds of 2 GPUs and the Xid
    assert all(now - 65 <= s <= now for s in stamps)
    assert status and all(",collector=replay," in ln and " up=1i," in ln for ln in status)


@pytest.mark.parametrize("argv,message", [
    (["--rebase-now", "--speed", "60"], "real time"),
    (["--backfill-s", "60"], "needs --rebase-now"),
    (["--speed", "-1"], "0 or more"),
    (["--source", "nvml"], "exclude each other"),
])
def test_contradictory_replay_options_are_refused(tmp_path: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--replay", str(_trace(tmp_path, 2)), "--stdout", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuhealth agent: ") and err.count("\n") == 1 and message in err
