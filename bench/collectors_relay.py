"""bench.collectors' relay variant: 1,250 node agents post to R relays (`gpuhealth agent relay`,
collectors.agent.relay; R = 40 by default, one per rack of ~31 nodes), which post to the
service. Three processes: the agents (bench.collectors._client), the relays (here, each a real
RelayServer on loopback with its flush thread), the service (the calling process, whose CPU is
the service's). Simulated at bench.collectors' scale (--sim-gpus), so the relays are as many
as the simulated nodes need at ~31 nodes each, and the relays' flush interval is compressed as
the agents' posting is (the client posts at the 10,000-GPU fleet's rate of 250 a second): each
relay forwards as many bodies per round, of as many nodes, as it would at full scale."""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

FLEET_NODES = 1250


def relays_for(sim_nodes: int, relays_total: int) -> int:
    return max(1, round(sim_nodes * relays_total / FLEET_NODES))


def _relays(conn: Connection, service_url: str, n: int, flush_s: float, spool_root: str
            ) -> None:
    """The relays' process: `n` relays, their ports sent; on "drain" every relay spools and
    forwards what it holds and this process's CPU since the last drain is sent back with the
    bodies forwarded, the forward failures and the service's partial refusals."""
    import logging

    from collectors.agent.push import Pusher
    from collectors.agent.relay import SPOOL_SUFFIX, Relay
    from collectors.agent.relay_http import RelayServer
    from collectors.agent.spool import Spool

    logging.getLogger("collectors").setLevel(logging.ERROR)
    relays = [Relay(Spool(Path(spool_root) / f"r{i}", 1 << 30, suffix=SPOOL_SUFFIX),
                    Pusher(service_url), flush_s=flush_s) for i in range(n)]
    servers = [RelayServer(r, "127.0.0.1", 0) for r in relays]
    for s in servers:
        s.start()
    stopping = threading.Event()
    runners = [threading.Thread(target=r.run, args=(stopping.is_set,), daemon=True)
               for r in relays]
    for t in runners:
        t.start()
    conn.send([s.port for s in servers])
    c0 = time.process_time()
    while conn.recv() == "drain":
        for r in relays:
            r.flush()
            r.forward()
        cpu, c0 = time.process_time() - c0, time.process_time()
        conn.send((cpu, sum(r.stats.bodies_sent for r in relays),
                   sum(r.stats.forward_failures + r.stats.bodies_refused_in_part
                       + r.stats.bodies_dropped for r in relays)))
    stopping.set()
    for t in runners:
        t.join(timeout=10)
    for s in servers:
        s.shutdown()
        s.server_close()


class Relays:
    """The relays' process, started against `service_url`."""

    def __init__(self, service_url: str, n: int, flush_s: float) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_relays, args=(theirs, service_url, n, flush_s,
                                                      self._tmp.name))
        self.proc.start()
        theirs.close()
        ports: list[int] = self.conn.recv()
        self.urls = [f"http://127.0.0.1:{p}/write" for p in ports]

    def drain(self) -> tuple[float, int, int]:
        """(relays' CPU since the last drain, bodies forwarded so far, failures so far)."""
        self.conn.send("drain")
        got: tuple[float, int, int] = self.conn.recv()
        return got

    def close(self) -> None:
        self.conn.send("stop")
        self.proc.join(timeout=30)
        self._tmp.cleanup()
