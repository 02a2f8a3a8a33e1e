"""Issue 29, defect 3: a cold service behind a relay of 10,000 GPUs (1,250 nodes of 8) loses
no sample. Before, the service answered the body's new GPUs past 1,024 with a 400 ("send the
rest again") that the relay, the agent and Telegraf take as final: 976 of 2,000 GPUs' samples
were lost on every (re)start. Now an anonymous body's excess is a 503 with Retry-After naming
the pending nodes (the relay sends just theirs again), and a writer with a token is admitted in
full. The service is `gpuhealth serve` as a subprocess; the store is read back whole."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from collectors.agent.push import Pusher
from collectors.agent.spool import Spool
from collectors.agent.target import Target
from tests.collectors.agent.cold_start import cold_start, expected, node_bodies, service, stored

pytest.importorskip("pyarrow")


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_writer_with_a_token_is_admitted_in_full_at_once(tmp_path: Path) -> None:
    run = cold_start(tmp_path, nodes=300, token="cold-start-token")
    assert run.stored == run.sent and len(run.sent) > 0
    assert run.forward_failures == 0, run.relay  # 2,400 new GPUs in one request: no 503


@pytest.mark.slow
def test_a_node_agent_sends_a_pending_round_again_as_told(tmp_path: Path) -> None:
    """The agent's side: a node of 8 GPUs against a service taking 4 new GPUs a request. The
    503's Retry-After is the wait (no doubling backoff) and the segment goes again whole."""
    [body] = node_bodies(1, 8, 2, float(int(time.time()) // 5 * 5))
    with service(tmp_path / "service", ingest={"max_new_gpus_per_batch": 4}) as (url, db):
        spool = Spool(tmp_path / "spool", 1 << 20)
        spool.append(gzip.decompress(body).decode())
        target = Target(spool, Pusher(url, arrow=False), backoff_s=(30.0, 60.0),
                        clock=time.monotonic)
        first = target.flush()
        assert first.failed and first.error.startswith("503"), first
        assert spool.stats.segments == 1  # kept, to go again in Retry-After's 1 s, not 30
        deadline = time.monotonic() + 20
        while spool.stats.segments and time.monotonic() < deadline:
            time.sleep(0.2)
            target.flush()
        assert spool.stats.segments == 0
    assert stored(db) == expected([body])
