"""Retraining from the hour tier: a simulated fleet's history run through the service's window
store, the hour tier the InfluxDB sink writes (service.history.influx.hour_tier.HourWriter)
stored in a local influxd, then `gpuhealth train --from-influx` over it in a child process (wall
time, peak memory), and how the features it builds compare with the replay's.

    python -m bench.model --from-influx 4096 90 --tier     # the issue's size, hourly samples
    python -m bench.model --tier-check 128 10              # features: hour tier against replay
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.influx_history import label_lines, write_lines
from bench.model_history import _influxd, scenario, train_child
from collectors.catalog import Scope
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.predictor.dataset import HourlyRecorder, RunFeatures
from models.predictor.features import FEATURES
from models.predictor.hour_table import features
from models.simulator.config import SimConfig
from service.history.influx.client import InfluxClient
from service.history.influx.hour_tier import HourWriter, read_tables
from service.history.influx.schema import ensure_schema
from service.history.influx.settings import InfluxSettings

BATCH_LINES = 100_000


def write_hours(config: SimConfig, cfg: InfluxSettings, *,
                record: bool = False) -> tuple[dict[str, Any], dict[Scope, RunFeatures]]:
    """The scenario through a pipeline: its hour tier and labels written to InfluxDB (the
    schema first, as the sink does); with `record`, the features a replay records beside."""
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.settings import Settings
    from service.stages.windows import window_config_for

    client = InfluxClient(cfg)
    ensure_schema(client, "INF", "INF")
    hour_client = InfluxClient(cfg.model_copy(update={"retention_policy": "rollup_1h"}))
    src = simulator_source(config)
    settings = Settings(window=window_config_for(src.step_s),
                        detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    pipe = build_pipeline(settings, Wiring.offline())
    writer = HourWriter(cfg.cluster)
    rec = HourlyRecorder()
    buf: list[str] = []
    lines = rounds = 0

    def push(to: InfluxClient) -> None:
        nonlocal lines
        lines += write_lines(to, buf)

    try:
        for r in feed_rounds(src.chunks, src.step_s):
            pipe.ingest(r.batch, r.now)
            if record:
                rec.observe(pipe.scorer.view, r.now)
            buf.extend(writer.lines(pipe.scorer.view))
            rounds += 1
            if len(buf) >= BATCH_LINES:
                push(hour_client)
        push(hour_client)
        buf.extend(label_lines(cfg.cluster, src.labels))
        push(client)
    finally:
        pipe.close()
        client.close()
        hour_client.close()
    return ({"rounds": rounds, "lines": lines, "step_s": src.step_s,
             "failures": sum(1 for lb in src.labels if lb.get("kind") == "failure")},
            rec.runs() if record else {})


def compare(replay: RunFeatures, tier: RunFeatures) -> dict[str, Any]:
    """Per feature, over the hours and entities the replay recorded a value for: the share the
    tier gives within 1e-4 (relative) and the largest difference."""
    hours = {int(h): i for i, h in enumerate(tier.hour_index)}
    ents = {k: i for i, k in enumerate(tier.keys)}
    rows = [(i, hours[int(h)]) for i, h in enumerate(replay.hour_index) if int(h) in hours]
    cols = [(i, ents[k]) for i, k in enumerate(replay.keys) if k in ents]
    a = replay.x[np.ix_([r for r, _ in rows], [c for c, _ in cols])]
    b = tier.x[np.ix_([r for _, r in rows], [c for _, c in cols])]
    per: dict[str, Any] = {}
    worst = 0.0
    for j, f in enumerate(FEATURES[replay.scope]):
        x, y = a[..., j], b[..., j]
        seen = ~np.isnan(x)
        if not seen.any():
            continue
        close = np.isclose(x[seen], y[seen], rtol=1e-4, atol=1e-4, equal_nan=True)
        share = float(close.mean())
        diff = float(np.nanmax(np.abs(x[seen] - y[seen]))) if share < 1 else 0.0
        per[f.name] = {"equal_share": round(share, 6), "max_abs_diff": round(diff, 6)}
        worst = max(worst, 1 - share)
    return {"hours": len(rows), "entities": len(cols), "features": per,
            "worst_unequal_share": round(worst, 6),
            "t_pred_max_diff_s": float(np.max(np.abs(
                replay.t_pred[[r for r, _ in rows]] - tier.t_pred[[r for _, r in rows]])))
            if rows else 0.0}


def check(gpus: int, days: float, step_s: int = 300) -> dict[str, Any]:
    """Features from the stored hour tier against those a replay of the same data records."""
    config = scenario(gpus, days, step_s)
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as tmp:
        proc, url = _influxd(Path(tmp) / "influxd")
        try:
            cfg = InfluxSettings(url=url, database="history", cluster="bench")
            wrote, replay = write_hours(config, cfg, record=True)
            client = InfluxClient(cfg)
            t = config.time
            got = read_tables(client, "bench", float(t.start_s), float(t.end_s))
            client.close()
        finally:
            proc.terminate()
            proc.wait(30)
    out: dict[str, Any] = {"gpus": gpus, "days": days, "step_s": step_s, **wrote,
                           "rows_read": got.rows}
    for scope, run in replay.items():
        table = got.tables.get(scope)
        if table is None:
            out[scope.value] = "no hour tier read"
            continue
        out[scope.value] = compare(run, features(table))
    return out


def run(gpus: int, days: float, epochs: int = 2, url: str | None = None) -> dict[str, Any]:
    """`train --from-influx` over a stored hour tier of GPUS x DAYS at an hourly step. `url`:
    an influxd that holds it already (database `history`, cluster `bench`, as this writes it),
    so a rerun measures the training alone."""
    config = scenario(gpus, days, 3600)
    cfg = {"database": "history", "cluster": "bench", "raw_retention": "INF",
           "rollup_retention": "INF"}
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as tmp:
        root = Path(tmp)
        proc = None
        try:
            wrote: dict[str, Any] = {"rounds": None, "lines": None}
            write_s = 0.0
            if url is None:
                proc, url = _influxd(root / "influxd")
                t0 = time.perf_counter()
                wrote, _ = write_hours(config, InfluxSettings(url=url, **cfg))  # type: ignore[arg-type]
                write_s = time.perf_counter() - t0
            # The range an operator would give: the fleet's 90 days (`--since 90d`), not years.
            child = train_child(root, {"url": url, **cfg}, epochs, ["--source", "hours"],
                                until=str(config.time.end_s))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    gpu_days = gpus * days
    return {"gpus": gpus, "days": days, "epochs": epochs, **wrote, "write_s": round(write_s, 1),
            **child, "s_per_gpu_day": child["train_wall_s"] / gpu_days,
            "goal_4096x90": "<= 1800 s and <= 4096 MB"}


def main(gpus: int, days: float, as_json: bool, *, tier_check: bool = False,
         url: str | None = None) -> int:
    import json

    r = check(gpus, days) if tier_check else run(gpus, days, url=url)
    if as_json:
        print(json.dumps(r, indent=2))
        return 0
    if tier_check:
        print(f"hour tier against replay, {gpus} GPUs x {days:g} days at {r['step_s']} s:")
        for scope in ("gpu", "ib_port"):
            c = r.get(scope)
            if isinstance(c, dict):
                bad = {k: v for k, v in c["features"].items() if v["equal_share"] < 1}
                print(f"  {scope}: {c['hours']} hours x {c['entities']} entities; "
                      f"{len(c['features']) - len(bad)} of {len(c['features'])} features equal "
                      f"everywhere (1e-4); unequal: "
                      + (", ".join(f"{k} {1 - v['equal_share']:.2%} (max {v['max_abs_diff']:g})"
                                   for k, v in bad.items()) or "none"))
        return 0
    print(f"train --from-influx from the hour tier, {gpus} GPUs x {days:g} days "
          f"({r['rounds']} hourly rounds, {r['lines']} lines written in {r['write_s']:.0f} s; "
          "None: the influxd given held them):"
          f"\n  {r['train_wall_s']:.0f} s wall, peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({1000 * r['s_per_gpu_day']:.2f} ms per GPU-day); goal at 4,096 x 90: "
          f"{r['goal_4096x90']}")
    return 0

