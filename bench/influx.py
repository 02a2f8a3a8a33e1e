"""InfluxDB sink throughput against a real local influxd, side by side with a naive writer.

    python -m bench.influx [--gpus 1000] [--rounds 6] [--json]

Figures, all from one run on one machine:
- format: line protocol built from ingest results (samples, rates) per second of CPU;
- spool: segments written to the disk spool (gzip) and read back, lines per second;
- sink: end to end, rounds handed to the sink until InfluxDB has them all, lines and samples
  per second of wall time, and the projected time for one 5-s round of 10,000 GPUs;
- naive: one line per HTTP request (what a simple exporter does), lines per second;
- history: latency of a 24-h query of one GPU (1-min means) over 24 h of 5-s samples.

    python -m bench.influx --compare [--gpus 1000] [--rounds 14]

Side by side in one influxd: the layout before issue 18 (every NVLink link and its rate every
round) and today's (links written when they move, every 30 s, and the round before a change),
the same ingest results into two databases; influxd's own CPU (from /proc) per 10,000-GPU
round for each, their ratio, and lines and field values per round.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from bench.pipeline import LINKS, PORTS, Fleet
from collectors.agent.spool import Spool
from collectors.catalog import EVENT_FIELD
from collectors.frames import Batch, Entity
from service.history.influx.client import InfluxClient
from service.history.influx.lines import LineWriter, ns
from service.history.influx.settings import InfluxSettings
from service.history.influx.sink import InfluxSink
from service.stages.ingest import Derived, EventLog, Ingestor, IngestResult
from service.stages.windows import WindowConfig, WindowStore
from tests.influx.server import InfluxServer

FLEET_GPUS = 10_000
ROUND_S = 5.0
T0 = 1_750_000_000.0


@dataclass
class Report:
    sim_gpus: int
    rounds: int
    lines_per_round: int
    samples_per_round: int
    format_lines_per_s: float
    spool_write_lines_per_s: float
    spool_read_mb_per_s: float
    sink_lines_per_s: float
    sink_samples_per_s: float
    projected_round_s: float  # wall time to store one 10,000-GPU round
    sink_cpu_per_round_s: float  # our CPU (format, gzip, spool, HTTP) per 10,000-GPU round
    influxd_cpu_per_round_s: float  # the server's CPU to store one 10,000-GPU round
    first_round_s: float  # the round that creates every series, projected to 10,000 GPUs
    first_round_influxd_cpu_s: float
    share_of_5s: float
    naive_lines_per_s: float
    speedup_vs_naive: float
    history_points: int
    history_query_ms: float


def _results(gpus: int, rounds: int) -> list[object]:
    """Ingest results of `rounds` rounds (so rates exist), as the pipeline hands them on."""
    fleet = Fleet(gpus)
    store = WindowStore(WindowConfig())
    ing = Ingestor(store, EventLog())
    out: list[object] = []
    for k in range(rounds + 1):
        t = T0 + ROUND_S * k
        res = ing.ingest(fleet.round(t), t)
        if k:
            out.append(res)
    return out


def _cpu(srv: InfluxServer) -> float:
    """CPU seconds influxd has used so far (user + system, from /proc)."""
    assert srv.proc is not None
    fields = Path(f"/proc/{srv.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(gpus: int, rounds: int) -> Report:
    results = _results(gpus, rounds)
    writer = LineWriter("bench")
    c0 = time.process_time()
    lines = [list(writer.batch(r.clean, r.rates)) for r in results]  # type: ignore[attr-defined]
    fmt_cpu = time.process_time() - c0
    n_lines = sum(map(len, lines))
    samples = sum(r.accepted for r in results)  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spool = Spool(root / "spool", 4 << 30)
        w0 = time.perf_counter()
        for chunk in lines:
            for i in range(0, len(chunk), 50_000):
                spool.append("\n".join(chunk[i:i + 50_000]) + "\n")
        spool_w = time.perf_counter() - w0
        r0 = time.perf_counter()
        nbytes = 0
        while (seg := spool.oldest()) is not None:
            nbytes += len(gzip.decompress(seg[1]))
            spool.remove(seg[0])
        spool_r = time.perf_counter() - r0

        srv = InfluxServer(root / "influxd")
        srv.start()
        try:
            cfg = InfluxSettings(url=srv.url, database="bench", raw_retention="INF")
            sink = InfluxSink(InfluxClient(cfg), Spool(root / "sink-spool", 4 << 30),
                              cluster="bench", manage_schema=True, retention=("INF", "400d"))
            # The first round creates every series (InfluxDB's index); steady state is what a
            # running cluster costs, so it is measured apart.
            f0, fi0 = time.perf_counter(), _cpu(srv)
            sink.write(results[0])  # type: ignore[arg-type]
            assert sink.flush(600), "the sink did not drain"
            first_s, first_influxd = time.perf_counter() - f0, _cpu(srv) - fi0
            s0, c0, i0 = time.perf_counter(), time.process_time(), _cpu(srv)
            for r in results[1:]:
                sink.write(r)  # type: ignore[arg-type]
            assert sink.flush(600), "the sink did not drain"
            sink_s = time.perf_counter() - s0
            ours_cpu, influxd_cpu = time.process_time() - c0, _cpu(srv) - i0
            sink.close()

            naive_n = 1000
            naive_lines = [ln.replace("cluster=bench", "cluster=naive")
                           for ln in lines[0][:naive_n]]
            with httpx.Client(timeout=30) as http:
                n0 = time.perf_counter()
                for ln in naive_lines:
                    http.post(f"{srv.url}/write", params={"db": "bench"}, content=ln)
                naive_s = time.perf_counter() - n0

            hist = InfluxClient(InfluxSettings(url=srv.url, database="bench"))
            day = [f"gpu,cluster=hist,gpu=0,host=h gpu_temp={50 + (k % 300) / 10} "
                   f"{int((T0 + 5 * k) * 1e9)}" for k in range(17_280)]
            body = gzip.compress("\n".join(day).encode())
            assert hist.write(body).status == 204
            q = ('SELECT mean("gpu_temp") FROM "gpu" WHERE "cluster"=\'hist\' AND "host"=\'h\' '
                 f'AND "gpu"=\'0\' AND time >= {int(T0 * 1e9)} AND time < '
                 f'{int((T0 + 86400) * 1e9)} GROUP BY time(60s) fill(none)')
            hist.query(q)  # first run opens the shard
            h0 = time.perf_counter()
            reps = 5
            for _ in range(reps):
                got = hist.query(q)
            hist_ms = (time.perf_counter() - h0) / reps * 1000
            assert len(got[0][0].values) in (1440, 1441)  # T0 is not on a minute
            hist.close()
        finally:
            srv.stop()
    per_round_lines = n_lines / rounds
    scale = FLEET_GPUS / gpus
    measured = rounds - 1
    sink_lps = per_round_lines * measured / sink_s
    projected = per_round_lines * scale / sink_lps
    naive_lps = naive_n / naive_s
    return Report(gpus, rounds, round(per_round_lines), round(samples / rounds),
                  n_lines / fmt_cpu, n_lines / spool_w, nbytes / spool_r / 1e6, sink_lps,
                  samples / rounds * measured / sink_s, projected, ours_cpu / measured * scale,
                  influxd_cpu / measured * scale, first_s * scale, first_influxd * scale,
                  projected / ROUND_S, naive_lps,
                  sink_lps / naive_lps, 17_280, hist_ms)


class DenseWriter(LineWriter):
    """The layout before issue 18, for the comparison only: every row of every frame."""

    def batch(self, batch: Batch, rates: Batch | None = None,
              derived: Iterable[Derived] = ()) -> Iterator[str]:
        for f in batch.frames.values():
            yield from self.frame(f)
        for d in derived:
            yield from self.derived(d)
        if rates is not None:
            for f in rates.frames.values():
                yield from self.frame(f, rates=True)
        ev = batch.events
        for key, ts, metric, value in zip(ev.keys, ev.ts, ev.metrics, ev.values, strict=True):
            yield f"{self._head(metric, Entity.parse(key))} {EVENT_FIELD}={int(value)}i {ns(ts)}"


@dataclass
class Layout:
    lines_per_round: float
    fields_per_round: float
    influxd_cpu_per_round_s: float  # projected to 10,000 GPUs, steady state
    first_round_influxd_cpu_s: float


def _write(srv: InfluxServer, db: str, chunks: list[list[str]]) -> float:
    """Each round's lines into `db` in 50,000-line gzip requests; influxd's CPU for them."""
    c = InfluxClient(InfluxSettings(url=srv.url, database=db))
    try:
        c.query(f'CREATE DATABASE "{db}"', write=True, database=False)
        c0 = _cpu(srv)
        for chunk in chunks:
            for i in range(0, len(chunk), 50_000):
                r = c.write(gzip.compress(("\n".join(chunk[i:i + 50_000]) + "\n").encode(), 1))
                assert r.status == 204, r
        time.sleep(0.5)  # let the WAL settle into the count, the same for both layouts
        return _cpu(srv) - c0
    finally:
        c.close()


def _fields(lines: list[str]) -> int:
    return sum(ln.split(" ", 2)[1].count("=") for ln in lines)


def compare(gpus: int, rounds: int) -> dict[str, Layout]:
    results: list[IngestResult] = _results(gpus, rounds)  # type: ignore[assignment]
    scale = FLEET_GPUS / gpus
    out: dict[str, Layout] = {}
    with tempfile.TemporaryDirectory() as tmp:
        srv = InfluxServer(Path(tmp) / "influxd")
        srv.start()
        try:
            for name, writer in (("before", DenseWriter("bench")), ("after", LineWriter("bench"))):
                lines = [list(writer.batch(r.clean, r.rates, r.derived)) for r in results]
                first = _write(srv, name, lines[:1])  # creates every series
                steady = _write(srv, name, lines[1:])
                n = len(lines) - 1
                out[name] = Layout(sum(map(len, lines[1:])) / n * scale,
                                   sum(_fields(x) for x in lines[1:]) / n * scale,
                                   steady / n * scale, first * scale)
        finally:
            srv.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000, help="simulated GPUs (8 per node, "
                    f"{LINKS} NVLinks per GPU, {PORTS} IB ports per node)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds (the first is measured apart)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", action="store_true",
                    help="influxd CPU of the layout before issue 18 and today's, side by side")
    a = ap.parse_args(argv)
    if a.compare:
        got = compare(a.gpus, a.rounds)
        if a.json:
            print(json.dumps({k: asdict(v) for k, v in got.items()}, indent=2))
            return 0
        print(f"{a.gpus} simulated GPUs x {a.rounds} rounds, per 10,000-GPU round "
              "(steady state; the first round, creating every series, apart):")
        for k, v in got.items():
            print(f"{k:8} {v.lines_per_round:10,.0f} lines {v.fields_per_round:12,.0f} values "
                  f"{v.influxd_cpu_per_round_s:8.2f} s influxd CPU "
                  f"(first round {v.first_round_influxd_cpu_s:.2f} s)")
        b, n = got["before"], got["after"]
        print(f"after / before: {n.influxd_cpu_per_round_s / b.influxd_cpu_per_round_s:.2f} of "
              f"the CPU, {n.lines_per_round / b.lines_per_round:.2f} of the lines")
        return 0
    rep = run(a.gpus, a.rounds)
    if a.json:
        print(json.dumps(asdict(rep), indent=2))
        return 0
    print(f"{a.gpus} simulated GPUs x {a.rounds} rounds: {rep.lines_per_round:,} lines, "
          f"{rep.samples_per_round:,} samples per round")
    print(f"format          {rep.format_lines_per_s:12,.0f} lines/s of CPU")
    print(f"spool write     {rep.spool_write_lines_per_s:12,.0f} lines/s (gzip + disk)")
    print(f"spool read      {rep.spool_read_mb_per_s:12,.1f} MB/s of line protocol")
    print(f"sink -> influxd {rep.sink_lines_per_s:12,.0f} lines/s, "
          f"{rep.sink_samples_per_s:,.0f} samples/s")
    print(f"naive writer    {rep.naive_lines_per_s:12,.0f} lines/s (one line per request)")
    print(f"sink / naive    {rep.speedup_vs_naive:12,.0f} x")
    print(f"10,000 GPUs     {rep.projected_round_s:12.2f} s per 5-s round "
          f"({rep.share_of_5s:.0%} of the interval)")
    print(f"  of which CPU  {rep.sink_cpu_per_round_s:12.2f} s ours (format, gzip, spool, HTTP), "
          f"{rep.influxd_cpu_per_round_s:.2f} s influxd's")
    print(f"first round     {rep.first_round_s:12.2f} s (creates every series; "
          f"{rep.first_round_influxd_cpu_s:.2f} s influxd CPU)")
    print(f"history query   {rep.history_query_ms:12.1f} ms for 24 h of one GPU at 1-min "
          f"means ({rep.history_points:,} raw points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
