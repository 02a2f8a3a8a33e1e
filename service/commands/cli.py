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
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from collectors.compat import UTC, dataclass
from service.commands.usage import (
    OWN_PACKAGES,
    UsageError,
    load_settings,
    missing_dependency,
    trace_missing,
)
from service.errors import GpuhealthError

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
# Each module named below calls `register(...)` when imported, for the subcommands listed with
# it. A command line that names a subcommand imports only its module: a node installed with the
# agent's dependencies alone (`pip install gpuhealth[agent]`) lacks what the others import
# (torch, SciPy, FastAPI), and the agent stays small. tests/commands/test_agent_imports.py keeps
# this table equal to what the modules register.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    f"service.commands.{module}": names for module, names in (
        ("demo", ("demo",)), ("simulate", ("simulate",)), ("evaluate", ("evaluate",)),
        ("agent", ("agent", "parse")), ("train", ("train",)), ("export", ("export",)),
        ("tokens", ("token",)), ("route", ("route-test",)), ("models", ("model", "labels")))}


# The commands a node runs, on Python 3.9+ (pyproject's requires-python); every other one is the
# server's and needs 3.11 (issue 33): below it, main refuses them before importing anything.
AGENT_COMMANDS = frozenset({"agent", "parse"})
SERVER_PYTHON = (3, 11)


def python_too_old(command: str) -> str | None:
    """Why `command` cannot run on this interpreter, or None."""
    if command in AGENT_COMMANDS or sys.version_info >= SERVER_PYTHON:
        return None
    here = ".".join(map(str, sys.version_info[:3]))
    return (f"needs Python 3.11 or newer (this is Python {here}); on this Python only "
            f"`gpuhealth agent` and `gpuhealth parse` run (the node agent)")


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
    p.add_argument("--from-start", action="store_true",
                   help="with --replay: replay the trace from its start, not from where the "
                        "last run of it stopped (that re-raises the alerts in it)")
    p.add_argument("--insecure", action="store_true",
                   help="allow listening beyond loopback with no write token")


def _run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from collectors.trace import TraceReader
    from service.api.app import CollectorFactory, create_app
    from service.commands.exposure import exposure_problem
    from service.pipeline import Pipeline
    from service.runtime.http_guard import server_options
    from service.runtime.replay_progress import resumable_replay
    from service.runtime.scheduler import Clock, DataClock
    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: give a port from 1 to 65535")
    if args.speed < 0:
        raise UsageError(f"--speed {args.speed:g}: give 0 (as fast as possible) or more")
    settings = load_settings(args.config)
    if args.config is not None:  # children (scheduled retraining) read the same settings
        os.environ["GPUHEALTH_CONFIG"] = str(Path(args.config).resolve())
    svc = settings.service
    why = exposure_problem(args.host or svc.host, settings.ingest.tokens,
                           args.insecure or svc.insecure)
    if why is not None:
        raise UsageError(why)
    collectors: Sequence[Collector] | CollectorFactory = []
    clock: Clock | None = None
    if args.from_start and args.replay is None:
        raise UsageError("--from-start goes with --replay TRACE")
    if args.replay is not None:
        step = settings.window.step_s
        try:
            TraceReader(args.replay, step_s=step)
        except FileNotFoundError as exc:
            raise trace_missing(exc) from None
        data_clock = clock = DataClock()  # score at the trace's time, not the wall clock's

        def collectors(pipeline: Pipeline) -> list[Collector]:
            return resumable_replay(pipeline, args.replay, speed=args.speed, clock=data_clock,
                                    from_start=args.from_start)
        # One round per collect run: poll at the replay's round rate (fast when unpaced).
        interval = step / args.speed if args.speed > 0 else 0.01
        svc = svc.model_copy(update={"collect_interval_s": min(svc.collect_interval_s, interval),
                                     "score_interval_s": min(svc.score_interval_s, interval)})
        settings = settings.model_copy(update={"service": svc})
    else:
        collectors = local_collectors(settings)
    _reach_state(settings)
    app = create_app(settings, collectors=collectors, clock=clock or time.time)
    # log_config=None: logging was configured once, in main. One access line per request
    # only at --log-level debug: a scraped service would otherwise log little else.
    uvicorn.run(app, host=args.host or svc.host, port=args.port or svc.port, log_config=None,
                access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
                **server_options(svc))
    return 0


def _reach_state(settings: Settings) -> None:
    """A bad or unreachable storage.postgres.dsn is refused here, on one line (exit 2): the
    app's lifespan would open it inside the server, where it is a startup traceback."""
    target = settings.storage.state_target
    if isinstance(target, str):
        from service.storage.postgres_db import PostgresDatabase

        PostgresDatabase(target, connect_timeout_s=settings.storage.postgres.connect_timeout_s
                         ).close()


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
    from service.assembly import Wiring
    from service.commands.progress import Progress
    from service.commands.refusals import RefusalTally
    from service.commands.usage import no_data
    from service.pipeline import build_pipeline
    from service.runtime.runner import run_replay
    from service.tick import TickResult

    if args.speed < 0:
        raise UsageError(f"--speed {args.speed:g}: give 0 (as fast as possible) or more")
    settings = load_settings(args.config)
    try:
        reader = TraceReader(args.trace, step_s=settings.window.step_s)
    except FileNotFoundError as exc:
        raise trace_missing(exc) from None
    # The replay prints its alerts itself; nothing is sent to the notification channels.
    pipeline = build_pipeline(settings, Wiring.offline(alert_db=args.db))
    refused = RefusalTally()
    pipeline.sinks.append(refused)
    pipeline.observers.append(refused)
    out = sys.stderr if args.json else sys.stdout
    bar = Progress(f"replay {args.trace.name}", unit="rounds")

    def on_tick(result: TickResult) -> None:
        for t in result.transitions:
            if t.derived:
                why = t.alertname
            else:
                signals = result.risk.scopes[t.scope].explain(t.slot)
                why = signals[0].signal if signals else "risk fell below the exit threshold"
            bar.write(f"{_iso(t.at)}  level {t.old} -> {t.new}  {t.scope} {t.entity}  "
                      f"risk {t.risk:.2f}  {why}", file=out)
        bar.update(bar.done + 1, f"at {_iso(result.at)}")

    try:
        with bar:
            summary = run_replay(pipeline, ReplaySource(reader, speed=args.speed),
                                 on_tick=on_tick)
    finally:
        pipeline.close()
    if not summary.rounds and not summary.error:
        raise no_data(args.trace, settings.window.step_s)
    if args.json:
        print(json.dumps({**summary.as_dict(), "rejected_why": refused.as_list()}, indent=2))
    else:
        first = _iso(summary.first_ts) if summary.first_ts is not None else "-"
        last = _iso(summary.last_ts) if summary.last_ts is not None else "-"
        print(f"replayed {summary.rounds} rounds ({first} .. {last}) in {summary.wall_s:.2f}s: "
              f"{summary.samples} samples, {summary.rejected} rejected, "
              f"{summary.transitions} alert transitions, {summary.alerts_opened} alerts opened")
        for entity, level in sorted(summary.peak_level.items()):
            print(f"  {entity}: peak level {level}")
        for line in refused.lines(_iso)[1:]:  # the count is in the line above
            print(line)
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

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Libraries that log one line per HTTP request at INFO: only `--log-level debug` shows them.
_PER_REQUEST_LOGGERS = ("uvicorn.access", "httpx", "httpcore")


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line (`gpuhealth parse: argument source: ...`) and exit 2, the way
    the commands report the input they refuse; `--help` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def package_version() -> str:
    """The installed distribution's version, else the one in the source tree's pyproject."""
    from importlib import metadata

    try:
        return metadata.version("gpuhealth")
    except metadata.PackageNotFoundError:
        if sys.version_info < (3, 11):  # no tomllib: an agent's Python, from a checkout
            return "unknown"
        import tomllib  # novermin (3.11+: the line above)

        try:
            with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
                return str(tomllib.load(f)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown level {value!r}; choose from {', '.join(x.lower() for x in LOG_LEVELS)}")
    return value.upper()


def global_options(top: bool = False) -> _Parser:
    """Options every command takes, before or after its name (`gpuhealth --log-level debug
    serve` and `gpuhealth serve --log-level debug`). Below the top level the default is
    SUPPRESS, so a subcommand only overrides what was given after its name."""
    p = _Parser(add_help=False)
    p.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                   default="INFO" if top else argparse.SUPPRESS,
                   help="debug, info (default), warning or error; debug also logs every HTTP "
                        "request")
    p.add_argument("--version", action="version", version=f"gpuhealth {package_version()}")
    return p


def _named_command(argv: Sequence[str]) -> str | None:
    """The subcommand a command line names, read without argparse (which needs every
    subcommand registered first): the first word that is not an option or --log-level's
    value. A guess that names no subcommand (`--log debug`, abbreviated) loads them all."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _load_commands(module: str) -> None:
    """Import a command module, whose import registers its subcommands. One whose third-party
    imports are not installed registers stand-ins that say so when run."""
    names = COMMAND_MODULES[module]
    if all(n in COMMANDS for n in names):
        return
    old = [n for n in names if python_too_old(n)]
    if old:  # the server's modules need 3.11 to import: listed, refused when run
        for name in old:
            register(name, _takes_anything, _unavailable_here(name),
                     "(not available: needs Python 3.11 or newer)")
        return
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] in OWN_PACKAGES:
            raise
        missing = exc.name
        for name in names:
            register(name, _takes_anything, _unavailable(missing),
                     f"(not available: needs the service's dependencies; {missing} is not "
                     f"installed)")


def _takes_anything(p: argparse.ArgumentParser) -> None:
    p.set_defaults(unavailable=True)  # main lets its arguments through unparsed


def _unavailable(module: str) -> Run:
    def run(args: argparse.Namespace) -> int:
        raise UsageError(missing_dependency(module))
    return run


def _unavailable_here(name: str) -> Run:
    def run(args: argparse.Namespace) -> int:
        raise UsageError(python_too_old(name) or "")
    return run


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for every subcommand, or, given the command line, for the one it names
    (only that subcommand's module is imported; `serve` and `replay` import none)."""
    named = _named_command(argv) if argv is not None else None
    homes = [m for m, names in COMMAND_MODULES.items() if named in names]
    if named not in COMMANDS:
        for module in homes or COMMAND_MODULES:
            _load_commands(module)
    parser = _Parser(prog="gpuhealth", parents=[global_options(top=True)],
                     description="Predictive health monitoring for GPU clusters")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        cmd.configure(sub.add_parser(name, help=cmd.help, description=cmd.help,
                                     parents=[global_options()]))
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # APScheduler logs every job run at INFO; its warnings (skipped runs) still come through.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLogger().level))
    debug = level.upper() == "DEBUG"
    for name in _PER_REQUEST_LOGGERS:  # httpcore's own DEBUG chatter stays off even then
        logging.getLogger(name).setLevel(logging.INFO if debug else logging.WARNING)
    from service.runtime.redact import install  # tokens and passwords never reach a log line

    install()


def _settings_error(exc: ValueError | GpuhealthError) -> bool:
    """Whether `exc` is a service.settings.SettingsError or a storage SchemaError (a data file
    this release cannot read), told without importing the settings tree (pydantic and every
    stage's config, ~10 MB) into commands that never load it, such as `agent`: a command that
    raised one has imported its module."""
    for module, name in (("service.settings", "SettingsError"),
                         ("service.storage.schema", "SchemaError"),
                         ("service.storage.postgres_db", "PostgresUnavailable")):
        found = sys.modules.get(module)
        if found is not None and isinstance(exc, getattr(found, name)):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "unavailable", False):  # parse_args, but for stand-ins
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    configure_logging(args.log_level)
    name = f"gpuhealth {args.command}"
    too_old = python_too_old(args.command)
    if too_old:  # serve and replay live here; the others were never imported
        print(f"{name}: {too_old}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command].run(args)
    except (UsageError, ValueError, GpuhealthError) as e:
        if not isinstance(e, UsageError) and not _settings_error(e):
            raise
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # `raise SystemExit("message")`: a refusal, said the same way
        if isinstance(e.code, str):
            print(f"{name}: {e.code}", file=sys.stderr)
            return 2
        raise
    except ModuleNotFoundError as e:  # a server command run where only the agent is installed
        if e.name is None or e.name.partition(".")[0] in OWN_PACKAGES:
            raise
        print(f"{name}: {missing_dependency(e.name)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
