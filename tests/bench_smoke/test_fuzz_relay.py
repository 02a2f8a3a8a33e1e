"""bench.fuzz_relay: every class of hostile exchange against a real relay on loopback gets
one of the answers the class allows, and the relay still takes a valid push after them."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from bench.fuzz_relay import actions, send
from collectors.agent.push import Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Relay
from collectors.agent.relay_http import RelayServer, ServerLimits
from collectors.agent.spool import Spool
from tests.collectors.agent.relay_service import free_port

pytest.importorskip("pyarrow")


@pytest.mark.slow
def test_every_hostile_class_gets_an_allowed_answer(tmp_path: Path) -> None:
    relay = Relay(Spool(tmp_path / "spool", 1 << 30, suffix=SPOOL_SUFFIX),
                  Pusher(f"http://127.0.0.1:{free_port()}/write"), tokens=["fz-token"])
    server = RelayServer(relay, "127.0.0.1", 0, ServerLimits(head_s=1.0, body_s=5.0))
    server.start()
    try:
        seen: dict[str, int | None] = {}
        gen = actions(random.Random(29), "fz-token")
        while len(seen) < 16:
            a = next(gen)
            if a.kind in seen:
                continue
            got = send(a, server.port)
            assert got in a.expect, (a.kind, got)
            seen[a.kind] = got
        body = gzip.compress(b"gpu,host=ok01,gpu=0 gpu_temp=41\n")
        ok = Pusher(f"http://127.0.0.1:{server.port}/write", token="fz-token",
                    arrow=False).push(body)
        assert ok.status == 204
    finally:
        server.shutdown()
        server.server_close()
