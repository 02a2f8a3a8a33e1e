"""`gpuhealth train --from-influx --since 90d`: retrain from the fleet's own history.

The samples the service wrote to InfluxDB are replayed a day at a time (each chunk of
`--chunk` seconds one query, service.history.influx.history_source) through a window store, the
hourly features of every finished day saved in the work directory (service/commands/
train_days.py: a rerun resumes), and the labels learned from the fleet (the `label`
measurement: auto failures, repairs, operator verdicts; optionally a labels file beside them)
are the targets. Training splits the span by time: the first 60 % of hours train, the next 20 %
validate and calibrate, the last 20 % test; the card names the span, the failure labels per mode
and source, and says which modes had too few labels to learn or to be scored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.commands.train_artifact import write_artifact
from service.commands.usage import UsageError

log = logging.getLogger(__name__)
DAY = 86400.0
FRACTIONS = (0.6, 0.2)  # as models.predictor.dataset.split


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("retraining from InfluxDB history (docs/learning.md)")
    g.add_argument("--from-influx", action="store_true",
                   help="train on the samples and labels the service stored in InfluxDB")
    g.add_argument("--since", default="90d", help="start: a duration before --until (90d, "
                   "12h) or a time (epoch seconds, RFC 3339); default 90d")
    g.add_argument("--until", help="end, exclusive: a time or a duration before now "
                   "(default now)")
    g.add_argument("--config", type=Path, help="settings file (YAML) naming storage.influxdb; "
                   "default $GPUHEALTH_CONFIG")
    g.add_argument("--cluster", help="cluster tag (default: storage.influxdb.cluster)")
    g.add_argument("--work", type=Path, help="work directory for the recorded days (default "
                   "OUT/history-work); a rerun with the same span resumes there")
    g.add_argument("--chunk", type=float, default=3600.0,
                   help="seconds of data per InfluxDB query (default 3600; divides a day)")
    g.add_argument("--step", type=float, help="sample step in seconds (default: from the data)")
    g.add_argument("--source", choices=("auto", "hours", "raw"), default="auto",
                   help="hours: build the features from the stored hour tier at once (fast); "
                   "raw: replay the raw samples a day at a time; auto (default): the hour "
                   "tier when the span has one")
    g.add_argument("--stop-after-days", type=int, help=argparse.SUPPRESS)  # tests: interrupt


def _time(text: str, now: float, flag: str) -> float:
    from service.history.history import QueryError, parse_time
    from service.history.influx.influxql import parse_duration

    try:
        return parse_time(text)
    except QueryError as exc:
        try:
            ago = parse_duration(text)
        except ValueError:
            raise UsageError(f"{flag} {text!r}: neither a duration (90d, 12h) nor a time "
                             f"({exc})") from None
        if ago is None:
            raise UsageError(f"{flag} {text!r}: give a finite duration") from None
        return now - ago


def span(args: argparse.Namespace, now: float) -> tuple[float, float]:
    until = now if args.until is None else _time(args.until, now, "--until")
    since = _time(args.since, until, "--since")
    if since >= until:
        raise UsageError(f"--since {args.since} must be before --until {args.until or 'now'}")
    return since, until


def _source_kind(source: str) -> str:
    if source == "verdict":
        return "verdict"
    if source == "file":
        return "file"
    return "auto" if source.startswith("rule:") or source in ("missing", "no_data") else source


def label_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Failure labels per mode and where they came from (auto, verdict, file)."""
    out: dict[str, Counter[str]] = {}
    for r in rows:
        if r.get("kind") == "failure":
            out.setdefault(str(r["mode"]), Counter())[_source_kind(str(r.get("source", "")))] += 1
    return {m: dict(sorted(c.items())) for m, c in sorted(out.items())}


def run(args: argparse.Namespace, epoch_bar: Callable[[str, int, bool], Any],
        init: Any = None) -> int:
    """`epoch_bar(scope, epochs, enabled)`: train's own per-epoch bar (passed in: this module
    is imported by service/commands/train.py); `init`: the model to fine-tune from
    (models.predictor.finetune.InitModel, service/commands/train_init.py) or None."""
    from collectors.catalog import Scope
    from collectors.labels import LabelError, load_labels
    from models.evaluation.events import truth_from_labels
    from models.predictor.dataset import MODES, targets
    from models.predictor.package import to_artifact
    from models.predictor.train import TrainConfig, kept_scope, train_scope
    from service.commands.train_days import DayBook
    from service.commands.usage import load_settings

    if args.trace:
        raise UsageError("--from-influx and --trace are two sources: give one")
    if args.chunk <= 0 or (DAY / args.chunk) % 1:
        raise UsageError(f"--chunk {args.chunk:g}: give seconds that divide a day (3600, 600)")
    if args.stop_after_days is not None and args.stop_after_days < 1:
        raise UsageError("--stop-after-days: give 1 or more")
    start, end = span(args, time.time())
    work = args.work or args.out / "history-work"
    held = DayBook.held(work)
    if held and held.get("args") == [args.since, args.until]:
        # The same relative span ("90d" up to now) resumes over the times it first meant.
        start, end = float(held["start"]), float(held["end"])
    extra: list[dict[str, Any]] = []
    if args.labels is not None:
        try:
            extra = [{**lb.to_dict(), "source": "file"} for lb in load_labels(args.labels)]
        except (OSError, LabelError) as exc:
            raise UsageError(f"--labels {args.labels}: {exc}") from None
    cfg = load_settings(args.config).storage.influxdb
    if not cfg.url:
        raise UsageError("--from-influx reads InfluxDB: set storage.influxdb.url (--config or "
                         "GPUHEALTH_STORAGE__INFLUXDB__URL)")
    tc = TrainConfig(window_h=args.window, hidden=args.hidden, epochs=args.epochs,
                     seed=args.seed, threads=args.threads, lr=args.lr, patience=args.patience)
    cluster = args.cluster or cfg.cluster
    started = time.perf_counter()
    got = None
    if args.source in ("auto", "hours"):
        got = _from_hours(cfg, cluster, start, end, args, extra)
        if got is None and args.source == "hours":
            raise UsageError(f"no hour tier of cluster {cluster!r} between {start:.0f} and "
                             f"{end:.0f} (service.history.influx.hour_tier writes it; "
                             "--source raw replays the raw samples)")
    if got is None:
        got = _from_raw(cfg, cluster, start, end, args, extra, work)
        if got is None:
            return 3
    runs, labels, first, last, step, days, told = got
    failures = list(truth_from_labels(labels).failures)
    counts = label_counts(labels)
    gpu = runs.get(Scope.GPU)
    if gpu is None or gpu.hours == 0:
        raise UsageError(f"no hour of features in {len(days)} day(s) of data: the span is "
                         "too short (features need whole hours of samples)")
    a, b = (int(gpu.hours * FRACTIONS[0]), int(gpu.hours * sum(FRACTIONS)))
    edges = (float(gpu.t_pred[0]), float(gpu.t_pred[min(a, gpu.hours - 1)]),
             float(gpu.t_pred[min(b, gpu.hours - 1)]), float(gpu.t_pred[-1]))
    periods = mode_periods(labels, edges)
    notes = too_few(periods, MODES)
    nodes, n_gpus = sorted(set(gpu.nodes)), len(gpu.keys)
    del gpu
    results = []
    # The smallest scope first, each scope's features dropped once it is trained: the largest
    # (the GPUs') then trains with no other scope's data beside it.
    for scope in sorted(runs, key=lambda sc: runs[sc].x.nbytes):
        rf = runs.pop(scope)
        modes = MODES[scope]
        if not any(periods.get(m, {}).get("train", 0) for m in modes):
            if init is not None and scope in init.scopes:
                notes.append(f"{scope}: no failure labelled in the training period: kept "
                             f"from {init.version} unchanged")
                results.append(kept_scope(scope, init.scopes[scope], tc, init.version))
                continue
            notes.append(f"{scope}: no failure labelled in the training period: its model is "
                         "not trained")
            continue
        tg = targets(rf, failures, tc.horizons, tc.window_h)
        bar2 = epoch_bar(scope.value, tc.epochs, not args.no_progress)
        try:
            results.append(train_scope(scope, [rf], [tg], tc, progress=bar2.update,
                                       init=None if init is None else init.scopes.get(scope)))
        except ValueError as exc:
            notes.append(f"{scope}: not trained: {exc}")
        finally:
            bar2.close()
            del rf, tg
    results.sort(key=lambda r: list(MODES).index(r.scope))
    for n in notes:  # beside --json's document, not in it
        print(f"gpuhealth train: {n}", file=sys.stderr if args.json else sys.stdout)
    if not results:
        raise UsageError("no model could be trained: " + "; ".join(notes))
    wall = time.perf_counter() - started
    history = {"cluster": cluster, "database": cfg.database, "from": days[0][0],
               "to": days[-1][1], "asked": [start, end],
               "data_from": first, "data_to": last, "step_s": step, "days": len(days),
               "source": "hour tier" if "hour tier" in told else "raw replay",
               "label_counts": counts, "label_periods": periods, "notes": notes,
               "split_times": {"train_from": edges[0], "val_from": edges[1],
                               "test_from": edges[2], "test_to": edges[3]},
               "labels_file": str(args.labels) if args.labels else None}
    meta = {"data": [{"source": f"influx:{cluster}", "nodes": len(nodes), "gpus": n_gpus,
                      "days": (days[-1][1] - days[0][0]) / DAY, "step_s": step,
                      "failures": len(failures)}],
            "learned_from": history, "train_wall_s": round(wall, 1), "command": _command(args)}
    if init is not None:
        meta["fine_tuned_from"] = init.describe(args.lr, args.epochs, args.patience)
    blob = json.dumps({"h": {k: v for k, v in history.items() if k != "notes"},
                       "cfg": tc.as_dict(),
                       **({} if init is None else {"init": init.version})},
                      sort_keys=True, default=str)
    artifact = to_artifact(results, tc, meta,
                           version="lstm-" + hashlib.sha256(blob.encode()).hexdigest()[:10])
    write_artifact(artifact, args.out, args.json, lambda digest: (
        f"trained on {len(days)} day(s) of cluster {cluster!r} ({told}) in {wall:.0f} s; "
        f"artifact {args.out} (weights sha256 {digest[:12]}); model card "
        f"{args.out / 'MODEL_CARD.md'}"))
    return 0

Gathered = tuple[dict[Any, Any], list[dict[str, Any]], float, float, float,
                 list[tuple[float, float]], str]


def _from_hours(cfg: Any, cluster: str, start: float, end: float, args: argparse.Namespace,
                extra: list[dict[str, Any]]) -> Gathered | None:
    """The span's features built at once from the stored hour tier; None when it holds none."""
    from collectors.catalog import Scope
    from models.predictor.hour_table import features
    from service.commands.progress import Progress
    from service.commands.train_days import day_edges
    from service.history.influx.client import InfluxClient, InfluxError
    from service.history.influx.hour_tier import HourRead, iter_tables
    from service.history.influx.labels import LabelReader

    # A query of 6 hours of a large fleet's hour tier takes seconds on a busy InfluxDB.
    client = InfluxClient(cfg.model_copy(update={"timeout_s": max(cfg.timeout_s, 120.0)}))
    bars: list[Any] = []

    def progress(done: float, total: float) -> None:
        if not args.no_progress:
            if not bars:
                bars.append(Progress("read hours", total, "h"))
            bars[0].update(done)

    read = HourRead()
    runs: dict[Any, Any] = {}
    try:
        # A scope's features are built, and its table dropped, before the next is read: the
        # inputs of 4,096 GPUs over 90 days are a GB, their features more.
        for scope, table in iter_tables(client, cluster, start, end, read, progress=progress):
            runs[scope] = features(table)
            del table
        if Scope.GPU not in runs:
            return None
        labels = LabelReader(client, cluster).read(start, end)
    except InfluxError as exc:
        raise UsageError(f"InfluxDB: {exc}") from None
    finally:
        client.close()
        for bar in bars:
            bar.close()
    gpu = runs[Scope.GPU]
    first = float(gpu.hour_index[0]) * 3600.0
    last = float(gpu.hour_index[-1] + 1) * 3600.0
    step = 3600.0  # what the features were built at; the raw step is not needed
    labels += [r for r in extra if start <= _t(r) < end]
    told = (f"hour tier: {read.rows} hourly points read"
            + (f", {read.refused} refused" if read.refused else ""))
    return runs, labels, first, last, step, day_edges(first, last), told


def _from_raw(cfg: Any, cluster: str, start: float, end: float, args: argparse.Namespace,
              extra: list[dict[str, Any]], work: Path) -> Gathered | None:
    """The raw samples replayed a day at a time, resumably; None when stopped as asked."""
    from service.commands.progress import Progress
    from service.commands.train_days import (
        DayBook,
        WorkMismatch,
        day_edges,
        record_days,
        replay_plan,
    )
    from service.history.influx.client import InfluxClient, InfluxError
    from service.history.influx.history_source import InfluxSource, NoHistory

    src = InfluxSource(InfluxClient(cfg), cluster, start, end, args.chunk)
    try:
        try:
            first, last = src.data_span()
            step = args.step or src.infer_step(first)
            labels = src.read_labels() + [r for r in extra if start <= _t(r) < end]
        except NoHistory as exc:
            raise UsageError(f"{exc} (check --since/--until, --cluster and the database "
                             f"{cfg.database!r})") from None
        # Days from the first stored sample to the last: a 90-day range over 10 days of data
        # is 10 days.
        days = day_edges(math.floor(first / step) * step, min(end, last + step))
        book = DayBook(work, {"cluster": cluster, "database": cfg.database, "start": start,
                              "end": end, "first": days[0][0], "step_s": step,
                              "chunk_s": args.chunk, "args": [args.since, args.until]})
        plan = replay_plan(book, days)
        resumed = sum(book.done(i) for i in range(len(days)))
        total = (days[-1][1] - days[plan[0]][0]) / 3600.0 if plan else 0.0
        bar = Progress("replay", total, "h") if not args.no_progress and total else None
        try:
            rec = record_days(src.batches, book, days, step, stop_after=args.stop_after_days,
                              progress=None if bar is None else bar.update)
        finally:
            if bar is not None:
                bar.close()
    except InfluxError as exc:
        raise UsageError(f"InfluxDB: {exc}") from None
    except WorkMismatch as exc:
        raise UsageError(str(exc)) from None
    finally:
        src.close()
    if rec.stopped:
        print(f"stopped after {len(rec.days)} of {len(days)} days as asked; rerun the same "
              f"command to resume from {work}")
        return None
    told = (f"{rec.replayed_h:.0f} data hours replayed, {resumed} day(s) from an earlier run")
    return book.load(rec.days), labels, first, last, step, days, told


def _t(row: dict[str, Any]) -> float:
    return float(row.get("time", row.get("start")) or 0.0)


def mode_periods(labels: list[dict[str, Any]],
                 edges: tuple[float, float, float, float]) -> dict[str, dict[str, int]]:
    """Failure labels per mode in the training, validation and test periods."""
    out: dict[str, dict[str, int]] = {}
    for r in labels:
        if r.get("kind") != "failure":
            continue
        t = _t(r)
        part = "train" if t < edges[1] else "val" if t < edges[2] else "test"
        c = out.setdefault(str(r["mode"]), {"train": 0, "val": 0, "test": 0})
        c[part] += 1
    return out


def too_few(periods: dict[str, dict[str, int]], modes: Any) -> list[str]:
    """What the card and the output say about modes whose heads cannot learn or be scored."""
    notes = []
    for scope_modes in modes.values():
        for m in scope_modes:
            c = periods.get(m, {"train": 0, "val": 0, "test": 0})
            if not sum(c.values()):
                notes.append(f"{m}: no failure labelled in the span: its heads learn nothing "
                             "and have no metrics")
                continue
            miss = [p for p, label in (("train", "training"), ("val", "validation"),
                                       ("test", "test")) if not c[p]]
            if miss:
                names = {"train": "training", "val": "validation (no calibration on "
                         "positives)", "test": "test (no held-out metrics)"}
                notes.append(f"{m}: too few labels ({c['train']} train, {c['val']} validation, "
                             f"{c['test']} test): none in " + ", ".join(names[p] for p in miss))
    return notes


def _command(args: argparse.Namespace) -> str:
    parts = ["gpuhealth train --from-influx", f"--since {args.since}"]
    if args.until:
        parts.append(f"--until {args.until}")
    if args.cluster:
        parts.append(f"--cluster {args.cluster}")
    if args.labels:
        parts.append(f"--labels {args.labels}")
    parts += [f"--epochs {args.epochs}", f"--hidden {args.hidden}", f"--window {args.window}",
              f"--lr {args.lr:g}", f"--patience {args.patience}", f"--seed {args.seed}",
              f"--threads {args.threads}"]
    parts += [f"--init {args.init}"] if args.init else []
    parts.append(f"--out {args.out}")
    return " ".join(parts)
