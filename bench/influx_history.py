"""A simulated fleet's history written straight into InfluxDB, as the service would have stored
it: the raw samples and Xid events through the InfluxDB sink's own LineWriter (sparse NVLink
points and per-GPU masks included) and the simulator's failures and repairs as points of the
`label` measurement (source `rule:sim`, the shape TickRecorder.labels writes). Much faster than
the whole pipeline, for the `train --from-influx` benchmark (bench/model.py --from-influx) and
the resume test; what `train --from-influx` reads is what the service writes."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any

from collectors.agent.push import Outcome
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.simulator.config import SimConfig
from service.history.influx.client import InfluxClient
from service.history.influx.lines import LineWriter, head, ns
from service.history.influx.settings import InfluxSettings

BATCH_LINES = 100_000


def label_lines(cluster: str, labels: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, lb in enumerate(labels, 1):
        if lb.get("kind") not in ("failure", "repair"):
            continue
        tags = {"cluster": cluster, "kind": lb["kind"], "scope": lb["scope"], "host": lb["node"],
                "entity": lb["entity"], "mode": str(lb.get("mode") or ""),
                "source": "rule:sim", "label_id": str(i)}
        action = lb.get("action") or ""
        out.append(f'{head("label", tags)} action="{action}",detail="",withdrawn=false '
                   f"{ns(float(lb['time']))}")
    return out


def write_lines(client: InfluxClient, buf: list[str]) -> int:
    """Write and clear `buf` (gzip, one request); returns how many lines went."""
    if not buf:
        return 0
    res = client.write(gzip.compress(("\n".join(buf) + "\n").encode(), 1))
    if res.outcome is not Outcome.SENT or (res.status or 204) >= 300:
        raise RuntimeError(f"InfluxDB refused a write: {res.detail}")
    n = len(buf)
    buf.clear()
    return n


def write_simulated(config: SimConfig, cfg: InfluxSettings,
                    progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Write the scenario's samples, events and labels; returns counts."""
    client = InfluxClient(cfg)
    client.query(f'CREATE DATABASE "{cfg.database}"', write=True, database=False)
    src = simulator_source(config)
    writer = LineWriter(cfg.cluster)
    buf: list[str] = []
    lines = rounds = 0

    def push() -> None:
        nonlocal lines
        lines += write_lines(client, buf)

    try:
        for r in feed_rounds(src.chunks, src.step_s):
            buf.extend(writer.batch(r.batch))
            rounds += 1
            if len(buf) >= BATCH_LINES:
                push()
                if progress is not None:
                    progress(r.now)
        buf.extend(label_lines(cfg.cluster, src.labels))
        push()
    finally:
        client.close()
    return {"rounds": rounds, "lines": lines,
            "failures": sum(1 for lb in src.labels if lb.get("kind") == "failure")}
