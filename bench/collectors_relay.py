"""bench.collectors' relay variant: 1,250 node agents post to R relays (`gpuhealth agent relay`,
collectors.agent.relay; R = 40 by default, one per rack of ~31 nodes), which post to the
service. Three processes: the agents (bench.collectors._client), the relays (here, each a real
RelayServer on loopback), the service (the calling process, whose CPU is the service's).
Simulated at bench.collectors' scale (--sim-gpus), so the relays are as many as the simulated
nodes need at ~31 nodes each.

The relays flush in step with the agents' simulated rounds, not by their own clock: the bench
compresses time (a 512-GPU slice posts a 10,000-GPU round's requests at the fleet's rate), and
on a loaded machine the client's rounds stretch while a compressed timer keeps its pace, so a
timer would send several bodies per relay per round where a real 5-s flush sends one. Instead
the client says when a flush interval's share of a round has been posted and answered
(`flush_points`: once per round at --flush-ms 5000, five times at 1000), and every relay
flushes and forwards then, as its --flush-ms timer does at full scale in real time."""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

FLEET_NODES = 1250
ROUND_S = 5.0  # bench.collectors.ROUND_S


def relays_for(sim_nodes: int, relays_total: int) -> int:
    return max(1, round(sim_nodes * relays_total / FLEET_NODES))


def flush_points(per_round: int, flush_s: float) -> list[int]:
    """Where in a round's `per_round` requests (in posting order) a relay flushing every
    `flush_s` flushes: after each of ROUND_S / flush_s equal shares, the last at the round's
    end (a flush slower than a round flushes at its end: the bench never holds a round over)."""
    n = max(1, min(per_round, round(ROUND_S / flush_s)))
    return [round(per_round * (i + 1) / n) for i in range(n)]


def relay_of(j: int, per_round: int, relays: int) -> int:
    """The relay the request at `j` in posting order goes to: the nodes are dealt to the
    relays in turn, so each relay's agents post throughout the round, as a rack's agents do."""
    return (j % per_round) % relays


def _relays(conn: Connection, rounds: Connection, service_url: str, n: int, spool_root: str
            ) -> None:
    """The relays' process: `n` relays, their ports sent. On each "flush" from the agents'
    process (`rounds`) every relay spools what it holds, the agents are answered, and every
    relay forwards; on "drain" (the harness, `conn`) the same, and this process's CPU since the
    last drain is sent back with the bodies forwarded, the forward failures and the service's
    partial refusals."""
    import logging

    from collectors.agent.push import Pusher
    from collectors.agent.relay import SPOOL_SUFFIX, Relay
    from collectors.agent.relay_http import RelayServer
    from collectors.agent.spool import Spool

    logging.getLogger("collectors").setLevel(logging.ERROR)
    relays = [Relay(Spool(Path(spool_root) / f"r{i}", 1 << 30, suffix=SPOOL_SUFFIX),
                    Pusher(service_url)) for i in range(n)]
    servers = [RelayServer(r, "127.0.0.1", 0) for r in relays]
    for s in servers:
        s.start()
    busy = threading.Lock()  # one flush-and-forward at a time

    def on_rounds() -> None:
        try:
            while rounds.recv() == "flush":
                with busy:
                    for r in relays:
                        r.flush()
                    rounds.send("flushed")  # the agents go on while the relays forward
                    for r in relays:
                        r.forward()
        except EOFError:
            pass

    flusher = threading.Thread(target=on_rounds, daemon=True)
    flusher.start()
    conn.send([s.port for s in servers])
    c0 = time.process_time()
    while conn.recv() == "drain":
        with busy:
            for r in relays:
                r.flush()
                r.forward()
        cpu, c0 = time.process_time() - c0, time.process_time()
        conn.send((cpu, sum(r.stats.bodies_sent for r in relays),
                   sum(r.stats.forward_failures + r.stats.bodies_refused_in_part
                       + r.stats.bodies_dropped for r in relays)))
    for s in servers:
        s.shutdown()
        s.server_close()


class Relays:
    """The relays' process, started against `service_url`; `rounds` is the end the agents'
    process says "flush" on (and waits for "flushed")."""

    def __init__(self, service_url: str, n: int) -> None:
        self.n = n
        self._tmp = tempfile.TemporaryDirectory()
        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.rounds, rounds_theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_relays, args=(theirs, rounds_theirs, service_url, n,
                                                      self._tmp.name))
        self.proc.start()
        theirs.close()
        rounds_theirs.close()
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
        self.rounds.close()
        self._tmp.cleanup()
