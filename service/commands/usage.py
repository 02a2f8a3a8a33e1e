"""What a command line got wrong, said in one line.

A subcommand raises UsageError for input it cannot run with (an unknown source, a path that is
not a trace, a scenario that does not validate); `gpuhealth` prints it as
`gpuhealth COMMAND: message` and exits 2, argparse's code for a usage error, without a
traceback. The helpers here turn the exceptions that the loaders raise for bad files (YAML,
pydantic, a trace without line protocol) into such a line, naming what is accepted.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from service.errors import field_errors

if TYPE_CHECKING:
    from service.settings import Settings

PRESETS = "demo, ci, fleet-year; families train-family, shifted-family"
TRACE_FORMAT = "a directory of *.lp / *.lp.gz line-protocol files or one such file"


# This repository's top-level packages: a ModuleNotFoundError naming one is a bug, not a
# dependency left out of the install (bench is not installed, and shipped code never imports it).
OWN_PACKAGES = frozenset({"collectors", "models", "service", "bench"})


def missing_dependency(module: str) -> str:
    """A command whose third-party import is not installed: the agent-only install
    (`pip install gpuhealth[agent]`) has `agent` and `parse`, not the service's commands."""
    top = module.partition(".")[0]
    return (f"needs {top}, which is not installed here (an agent-only install?); install the "
            f"service's dependencies: pip install 'gpuhealth[server]'")


class UsageError(Exception):
    """Input the command cannot run with; the message names the problem and what is accepted."""


def source_name(value: str) -> str:
    """argparse `type` for a collector source name: unknown names fail at parse time."""
    from collectors import registry

    if value not in registry.SOURCES:
        raise argparse.ArgumentTypeError(
            f"unknown source {value!r}; choose from {', '.join(sorted(registry.SOURCES))}")
    return value


def yaml_problem(path: str | os.PathLike[str], exc: Exception) -> str:
    """A YAML parse error on one line: PyYAML's own message spans several, with a caret."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{path}: not valid YAML ({problem}{where})"


def _os_problem(path: str | os.PathLike[str], exc: OSError) -> str:
    return f"{path}: {exc.strerror or exc}"


def load_settings(path: str | Path | None) -> Settings:
    """service.settings.load, with a missing, unreadable or non-YAML file as a UsageError
    (SettingsError, one line per invalid setting, is left to `main`)."""
    import yaml

    from service.settings import SettingsError, load

    shown = path or os.environ.get("GPUHEALTH_CONFIG") or ""
    try:
        return load(path)
    except SettingsError:
        raise
    except OSError as exc:
        raise UsageError(f"settings file {_os_problem(shown, exc)}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"settings file {yaml_problem(shown, exc)}") from None
    except ValueError as exc:  # the file holds something other than a mapping
        raise UsageError(str(exc)) from None


@contextmanager
def scenario_errors(scenario: str | os.PathLike[str],
                    overrides: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Turn what loading a scenario (a preset or a YAML file, plus overrides) raises into a
    UsageError: a missing file, bad YAML, a value the config refuses."""
    import yaml
    from pydantic import ValidationError

    try:
        yield
    except FileNotFoundError as exc:
        if overrides is not None and str(exc.filename) == str(overrides):
            raise UsageError(f"--overrides {overrides}: no such file") from None
        raise UsageError(f"no scenario {str(scenario)!r}: a preset ({PRESETS}) or a scenario "
                         f"YAML file") from None
    except OSError as exc:
        raise UsageError(f"scenario {_os_problem(exc.filename or scenario, exc)}") from None
    except yaml.YAMLError as exc:
        where = scenario if overrides is None else f"{scenario} or --overrides {overrides}"
        raise UsageError(yaml_problem(where, exc)) from None
    except ValidationError as exc:
        bad = "; ".join(field_errors(exc, "(scenario)"))
        raise UsageError(f"scenario {scenario}: {bad}") from None
    except ValueError as exc:  # not a mapping, an unknown `preset:`
        raise UsageError(f"scenario {scenario}: {exc}") from None


def out_dir(path: Path | None, flag: str = "--out") -> None:
    """Refuse an output directory that is a file before the work, not after it."""
    if path is not None and path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: not a directory")


def trace_missing(exc: FileNotFoundError) -> UsageError:
    """TraceReader's "no trace at PATH" / "no *.lp files in DIR", with what a trace is."""
    return UsageError(f"{exc}; a trace is {TRACE_FORMAT}")


def first_refusal(trace: Path, step_s: float = 5.0) -> str:
    """Why the start of a trace gave no samples: the first refused line's reason, if any."""
    from collectors.trace import TraceReader

    try:
        for rnd in TraceReader(trace, step_s=step_s, chunk_lines=1000).rounds():
            if rnd.batch.rejected:
                return str(rnd.batch.rejected[0])
            break
    except (OSError, ValueError) as exc:
        return str(exc)
    return ""


def no_data(trace: Path, step_s: float = 5.0) -> UsageError:
    """The error for a path that exists but holds no usable sample."""
    why = first_refusal(trace, step_s)
    return UsageError(f"{trace} holds no usable samples{f' ({why})' if why else ''}; a trace "
                      f"is {TRACE_FORMAT} (docs/trace-format.md)")
