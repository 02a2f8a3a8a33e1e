"""Issue 29, defect 3: a cold service behind a relay of 10,000 GPUs (1,250 nodes of 8) loses
no sample. Before, the service answered the body's new GPUs past 1,024 with a 400 ("send the
rest again") that the relay, the agent and Telegraf take as final: 976 of 2,000 GPUs' samples
were lost on every (re)start. Now an anonymous body's excess is a 503 with Retry-After naming
the pending nodes (the relay sends just theirs again), and a writer with a token is admitted in
full. The service is `gpuhealth serve` as a subprocess; the store is read back whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collectors.agent.cold_start import cold_start

pytest.importorskip("pyarrow")


def test_a_cold_start_behind_a_relay_of_10000_gpus_loses_no_sample(tmp_path: Path) -> None:
    run = cold_start(tmp_path)
    assert len({s[0] for s in run.sent if ":gpu" in s[0] and ":nvlink" not in s[0]}) == 10_000
    lost = run.sent - run.stored
    assert not lost, f"{len(lost)} of {len(run.sent)} samples lost, e.g. {sorted(lost)[:3]}"
    assert run.stored == run.sent  # nothing else, nothing altered
    # Anonymous (no write tokens): taken 1,024 new GPUs a request, each resend the pending
    # nodes' samples only; the relay waited as told and dropped nothing.
    assert run.forward_failures >= 9, run.relay
    assert run.relay["bodies_dropped"] == 0 and run.relay["bodies_refused_in_part"] == 0


def test_a_writer_with_a_token_is_admitted_in_full_at_once(tmp_path: Path) -> None:
    run = cold_start(tmp_path, nodes=300, token="cold-start-token")
    assert run.stored == run.sent and len(run.sent) > 0
    assert run.forward_failures == 0, run.relay  # 2,400 new GPUs in one request: no 503
