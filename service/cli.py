"""The `gpuhealth` command: `serve` and `replay` here, more subcommands by registration.

Subcommands live in an explicit registry (name -> how to configure its parser, how to run it)
that refuses duplicates. A module adds its own with `register(...)` at import and is listed in
COMMAND_MODULES; its heavy imports (torch, matplotlib) belong inside its run function so that
`gpuhealth replay` does not pay for them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collectors.base import Collector
    from service.settings import Settings

log = logging.getLogger(__name__)

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Command:
    configure: Configure
    run: Run
    help: str


COMMANDS: dict[str, Command] = {}

# ---- subcommands registered by other modules --------------------------------------------------
# The lead adds `demo`, `simulate` and `evaluate` here: each module named below calls
# `register(...)` when imported.
COMMAND_MODULES: tuple[str, ...] = (
    "service.demo", "service.simulate", "service.evaluate", "service.agent_cmd", "service.train",
    "service.export", "service.tokens_cmd", "service.route_cmd")


def register(name: str, configure: Configure, run: Run, help: str = "") -> None:
    if name in COMMANDS:
        raise ValueError(f"subcommand {name!r} is already registered")
    COMMANDS[name] = Command(configure, run, help)


# ---- serve ------------------------------------------------------------------------------------

def _configure_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="settings file (YAML); default $GPUHEALTH_CONFIG")
    p.add_argument("--host", help="listen address (default: settings service.host)")
    p.add_argument("--port", type=int, help="listen port (default: settings service.port)")
    p.add_argument("--replay", type=Path, metavar="TRACE",
                   help="feed the service from a trace instead of live collectors")
    p.add_argument("--speed", type=float, default=1.0,
                   help="replay speed: 1 real time, 10 ten times faster, 0 as fast as possible")


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from collectors.replay import ReplaySource
    from collectors.trace import TraceReader
    from service.api import create_app
    from service.scheduler import Clock, DataClock
    from service.settings import load

    settings = load(args.config)
    svc = settings.service
    collectors: list[Collector] = []
    clock: Clock | None = None
    if args.replay is not None:
        step = settings.window.step_s
        collectors.append(ReplaySource(TraceReader(args.replay, step_s=step), speed=args.speed))
        clock = DataClock()  # score at the trace's time, not the wall clock's
        # One round per collect run: poll at the replay's round rate (fast when unpaced).
        interval = step / args.speed if args.speed > 0 else 0.01
        svc = svc.model_copy(update={"collect_interval_s": min(svc.collect_interval_s, interval),
                                     "score_interval_s": min(svc.score_interval_s, interval)})
        settings = settings.model_copy(update={"service": svc})
    else:
        collectors = local_collectors(settings)
    app = create_app(settings, collectors=collectors, clock=clock or time.time)
    # log_config=None: logging was configured once, in main.
    uvicorn.run(app, host=args.host or svc.host, port=args.port or svc.port, log_config=None)
    return 0


def local_collectors(settings: Settings) -> list[Collector]:
    """The sources named in settings.collectors (each validated by its own constructor, so a
    wrong key fails at start-up with its source's name), plus every detected one if `auto`."""
    import socket

    from collectors import registry

    cfg = settings.collectors
    names = dict(cfg.sources)
    if cfg.auto:
        for name in registry.detected():
            names.setdefault(name, {})
    host = socket.gethostname()
    out: list[Collector] = []
    problems: list[str] = []
    for name, section in names.items():
        try:
            out.append(registry.get(name).build(host, section))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"collectors.sources.{name}: {exc}")
    if problems:
        raise SystemExit("bad collector settings:\n  " + "\n  ".join(problems))
    return out


# ---- replay -----------------------------------------------------------------------------------

def _configure_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=Path, help="a trace directory or one .lp / .lp.gz file")
    p.add_argument("--speed", type=float, default=0.0,
                   help="replay speed: 0 (default) as fast as possible, 1 real time")
    p.add_argument("--config", type=Path, help="settings file (YAML); default $GPUHEALTH_CONFIG")
    p.add_argument("--db", default=":memory:",
                   help="SQLite file to keep the replay's alerts in (default: in memory)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _run_replay(args: argparse.Namespace) -> int:
    from collectors.replay import ReplaySource
    from collectors.trace import TraceReader
    from service.pipeline import Pipeline, TickResult
    from service.runner import run_replay
    from service.settings import load

    if args.speed < 0:
        print("gpuhealth replay: --speed must be 0 or more", file=sys.stderr)
        return 2
    settings = load(args.config)
    try:
        reader = TraceReader(args.trace, step_s=settings.window.step_s)
    except FileNotFoundError as exc:
        print(f"gpuhealth replay: {exc}", file=sys.stderr)
        return 2
    # The replay prints its alerts itself; nothing is sent to the notification channels.
    pipeline = Pipeline(settings, alert_db=args.db, notifiers=[])
    out = sys.stderr if args.json else sys.stdout

    def progress(result: TickResult) -> None:
        for t in result.transitions:
            if t.derived:
                why = t.alertname
            else:
                signals = result.risk.scopes[t.scope].explain(t.slot)
                why = signals[0].signal if signals else "risk fell below the exit threshold"
            print(f"{_iso(t.at)}  level {t.old} -> {t.new}  {t.scope} {t.entity}  "
                  f"risk {t.risk:.2f}  {why}", file=out, flush=True)

    try:
        summary = run_replay(pipeline, ReplaySource(reader, speed=args.speed), on_tick=progress)
    finally:
        pipeline.close()
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        first = _iso(summary.first_ts) if summary.first_ts is not None else "-"
        last = _iso(summary.last_ts) if summary.last_ts is not None else "-"
        print(f"replayed {summary.rounds} rounds ({first} .. {last}) in {summary.wall_s:.2f}s: "
              f"{summary.samples} samples, {summary.rejected} rejected, "
              f"{summary.transitions} alert transitions, {summary.alerts_opened} alerts opened")
        for entity, level in sorted(summary.peak_level.items()):
            print(f"  {entity}: peak level {level}")
    if summary.error:
        print(f"gpuhealth replay: the trace broke off: {summary.error}", file=sys.stderr)
        return 1
    return 0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


register("serve", _configure_serve, _run_serve, "run the HTTP service with its scheduler")
register("replay", _configure_replay, _run_replay,
         "run the pipeline over a trace and print alerts as they fire")


# ---- entry point ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    parser = argparse.ArgumentParser(prog="gpuhealth",
                                     description="Predictive health monitoring for GPU clusters")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        cmd.configure(sub.add_parser(name, help=cmd.help, description=cmd.help))
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # APScheduler logs every job run at INFO; its warnings (skipped runs) still come through.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLogger().level))
    from service.api.redact import install  # tokens and passwords never reach a log line

    install()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    from service.settings import SettingsError

    try:
        return COMMANDS[args.command].run(args)
    except SettingsError as e:
        print(f"gpuhealth {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
