"""`gpuhealth demo`: a small simulated cluster with injected failures, run accelerated through
the full pipeline with the API and the console up, alerts shown as they fire, and a closing
table of every injected failure (alerted or not, level, lead time) and every false alarm.

The API runs on the trace's clock, not the wall clock: the simulated hours start at the
scenario's start time, so "the last hour" the console's charts ask for is the trace's last
hour, and the samples and risk the demo keeps in its SQLite file are there to chart."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.assembly import Wiring
from service.commands.cli import register
from service.commands.progress import Progress
from service.commands.refusals import RefusalTally
from service.commands.usage import UsageError
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.tick import TickResult

START_PORT = 8080


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speed", type=float, default=600.0,
                   help="simulated seconds per wall second (default 600: 6 h in 36 s); "
                        "0 runs as fast as possible")
    p.add_argument("--seed", type=int, default=0, help="simulator seed")
    p.add_argument("--port", type=int, default=START_PORT,
                   help="API port (the next free one if taken); 0 to run without the API")
    p.add_argument("--data-dir", type=Path, default=Path("var/demo"),
                   help="where the demo's SQLite database goes (the database is cleared first)")
    p.add_argument("--serve", action="store_true",
                   help="keep the API up after the run until interrupted")
    p.add_argument("--json", action="store_true", help="print the summary as JSON only")
    p.add_argument("--no-history", action="store_true",
                   help="keep no sample history (the console's metric charts stay empty; "
                        "faster at --speed 0)")


def _free_port(start: int) -> int:
    for port in range(start, start + 50):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}..{start + 49}")


class TraceClock:
    """The trace's time: the newest round the demo has fed the pipeline. The API reads it as
    its clock, so history queries ("the last hour"), silences and acks are in trace time."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class _Api:
    """The service's API and console over the demo's pipeline, in a background thread."""

    def __init__(self, pipeline: Pipeline, port: int, clock: TraceClock) -> None:
        import uvicorn

        from service.api.app import create_app
        from service.runtime.http_guard import server_options

        app = create_app(lambda: pipeline, clock=clock, schedule=False)
        cfg = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                             **server_options(pipeline.settings.service))
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> _Api:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _clock(t: float, start: float) -> str:
    s = int(t - start)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}"


def _lead(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def run_demo(args: argparse.Namespace, out: Any = sys.stdout,
             on_api: Callable[[str], None] | None = None,
             on_done: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the demo; `on_api` is called with the API's URL once it is up, `on_done` with it
    once the trace has run, while the API still serves the end state."""
    from models.evaluation.demo import summarize_demo
    from models.evaluation.rounds import Rounder
    from models.simulator import Simulator, load_scenario

    quiet = bool(args.json)
    # The demo prints each alert itself; the notifier's and ingest's own log lines would
    # interleave with that, so only errors get through while it runs.
    logging.getLogger("service").setLevel(logging.ERROR)

    def say(msg: str) -> None:
        if not quiet:
            print(msg, file=out, flush=True)

    if args.speed < 0:
        raise UsageError(f"--speed {args.speed:g}: give 0 (as fast as possible) or more")
    config = load_scenario("demo").model_copy(update={"seed": args.seed})
    sim = Simulator(config)
    step = float(config.time.step_s)
    start, end = float(config.time.start_s), config.time.end_s
    history = not getattr(args, "no_history", False)
    settings = Settings(storage={"data_dir": args.data_dir,  # type: ignore[arg-type]
                                 "write_samples": history})
    _clear_database(settings)
    # Risk history always (a row a minute per entity at most); samples unless --no-history:
    # written change-only, the demo's 16M samples cost it about half again its time.
    pipeline = build_pipeline(settings, Wiring(sinks=(), sample_history=True, influxdb=False))
    refused = RefusalTally()  # says what the `rejected` count was
    pipeline.sinks.append(refused)
    pipeline.observers.append(refused)
    transitions: list[Any] = []
    clock = TraceClock(start)
    api: _Api | None = _Api(pipeline, _free_port(args.port), clock) if args.port else None
    gpus = len(sim.tables[next(iter(sim.tables))]) if sim.tables else 0
    say(f"gpuhealth demo: {gpus} GPUs, {(end - start) / 3600:.0f} h of {step:g}-s samples "
        f"with {len([x for x in sim.labels if x['kind'] == 'failure'])} injected failures, "
        f"at {'full speed' if not args.speed else f'{args.speed:g}x'}")

    def on_tick(res: TickResult) -> None:
        for t, alert in zip(res.transitions, _alerts_for(res), strict=False):
            if not t.derived:
                transitions.append(t)
            if t.new == 0:
                say(f"[{_clock(t.at, start)}] resolved      {t.entity}")
                continue
            if t.derived:
                say(f"[{_clock(t.at, start)}] level {t.old}->{t.new}  {t.entity:<22} "
                    f"{t.alertname}")
                continue
            top = alert.explanation[0] if alert and alert.explanation else {}
            value = top.get("value")
            say(f"[{_clock(t.at, start)}] level {t.old}->{t.new}  {t.entity:<22} risk {t.risk:.2f}"
                f"  {top.get('rule', '')}: {top.get('signal', '')} = "
                f"{'-' if value is None else f'{value:.3g}'}")

    wall0 = time.monotonic()
    with api if api is not None else contextlib.nullcontext():
        if api is not None:
            if on_api is not None:
                on_api(api.url)
            say(f"console at {api.url}/  (fleet grid, alerts, node charts; API docs at "
                f"{api.url}/docs, e.g. {api.url}/v1/alerts)")
        rounder = Rounder(step)
        next_progress = start + 3600
        # With --json the hourly lines are off: progress goes to stderr instead.
        bar = Progress("demo", (end - start) / 3600, "h") if quiet else None
        for chunk in sim.run():
            for rnd in rounder.feed(chunk):
                on_tick(pipeline.process(rnd.batch, rnd.now))
                clock.now = rnd.now
                if bar is not None:
                    bar.update((rnd.now - start) / 3600)
                if rnd.now >= next_progress:
                    open_ = len(pipeline.alerts.open_alerts())
                    done = (rnd.now - start) / (end - start)
                    say(f"[{_clock(rnd.now, start)}] {done:4.0%}  "
                        f"{pipeline.stats.samples_ingested:,} samples, {open_} alerts open")
                    next_progress += 3600
                if args.speed:
                    ahead = (rnd.now - start) / args.speed - (time.monotonic() - wall0)
                    if ahead > 0:
                        time.sleep(ahead)
        for rnd in rounder.close():
            on_tick(pipeline.process(rnd.batch, rnd.now))
            clock.now = rnd.now
        if bar is not None:
            bar.close()
        rows = summarize_demo(sim.labels, transitions, start, end)
        summary = {"wall_s": round(time.monotonic() - wall0, 1), "start": start, "end": end,
                   "samples": pipeline.stats.samples_ingested,
                   "rejected": pipeline.stats.samples_rejected,
                   "rejected_why": refused.as_list(), "rows": rows}
        say(_table(rows, start))
        say(f"{summary['samples']:,} samples in {summary['wall_s']} s; alerts and deliveries "
            f"in {settings.storage.sqlite_path}")
        for line in refused.lines(lambda t: _clock(t, start), sim.labels, step):
            say(line)
        if on_done is not None and api is not None:
            on_done(api.url)
        if args.serve and api is not None:
            say(f"console still at {api.url}/ (the trace's clock stopped at "
                f"{_clock(clock.now, start)}); Ctrl-C to stop")
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    pipeline.close()
    return summary


def _clear_database(settings: Settings) -> None:
    """Start from an empty database: only the demo's own SQLite files are removed, so a
    --data-dir that holds anything else loses nothing."""
    where = settings.storage.data_dir
    if where.exists() and not where.is_dir():
        raise UsageError(f"--data-dir {where}: not a directory")
    db = settings.storage.sqlite_path
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        path.unlink(missing_ok=True)


def _alerts_for(res: TickResult) -> list[Any]:
    """The alert row each transition opened or changed, in transition order."""
    by_entity = {a.entity: a for a in res.alerts}
    return [by_entity.get(t.entity) for t in res.transitions]


def _table(rows: list[dict[str, Any]], start: float) -> str:
    fails = [r for r in rows if r["kind"] == "failure"]
    falses = [r for r in rows if r["kind"] == "false_alarm"]
    lines = ["", "Injected failures:",
             f"  {'time':>5}  {'mode':<16} {'entity':<24} {'precursor':<9} {'alerted':<7} "
             f"{'level':>5}  lead"]
    for r in fails:
        lines.append(
            f"  {_clock(r['time'], start):>5}  {r['mode']:<16} {r['entity']:<24} "
            f"{'yes' if r['precursor'] else 'no':<9} {'yes' if r['alerted'] else 'NO':<7} "
            f"{r['level'] or '-':>5}  {_lead(r['lead_s']) if r['alerted'] else '-'}")
    caught = sum(1 for r in fails if r["alerted"])
    lines.append(f"  {caught} of {len(fails)} failures alerted "
                 f"({sum(1 for r in fails if r['alerted'] and r['precursor'])} of "
                 f"{sum(1 for r in fails if r['precursor'])} with precursors)")
    lines.append(f"False alarms: {len(falses)}")
    for r in falses:
        lines.append(f"  {_clock(r['time'], start):>5}  level {r['level']}  {r['entity']:<24} "
                     f"{r.get('rule') or ''}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    summary = run_demo(args)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return 0


register("demo", _configure, _run, "simulate a small cluster with failures and catch them")
