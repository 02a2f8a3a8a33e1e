"""Global options: `--version`, and `--log-level` before or after the subcommand; per-request
HTTP log lines (uvicorn's access log, httpx's "HTTP Request:") only at debug."""

from __future__ import annotations

import argparse
import logging
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.commands import cli

ROOT = Path(__file__).resolve().parents[2]
HTTP_LOGGERS = ("uvicorn.access", "httpx", "httpcore")


@pytest.fixture(autouse=True)
def _restore_log_levels() -> Iterator[None]:
    saved = {n: logging.getLogger(n).level for n in ("", "apscheduler", *HTTP_LOGGERS)}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def _pyproject_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


@pytest.mark.parametrize("argv", [["--version"], ["replay", "--version"],
                                  ["token", "list", "--version"]])
def test_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuhealth {cli.package_version()}"


def test_version_falls_back_to_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cli.package_version() == _pyproject_version()


@pytest.mark.parametrize("argv,level", [
    (["replay", "t"], "INFO"),
    (["--log-level", "warning", "replay", "t"], "WARNING"),
    (["replay", "t", "--log-level", "debug"], "DEBUG"),
    (["replay", "--log-level", "ERROR", "t"], "ERROR"),
    (["--log-level", "error", "replay", "t", "--log-level", "debug"], "DEBUG"),  # the later wins
    (["token", "list", "--log-level", "debug"], "DEBUG"),  # a sub-subcommand too
    (["token", "--log-level", "warning", "list"], "WARNING"),
])
def test_log_level_before_or_after_the_subcommand(argv: list[str], level: str) -> None:
    assert cli.build_parser().parse_args(argv).log_level == level


def test_every_subcommand_takes_the_global_options() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(cli.COMMANDS)
    for name, p in sub.choices.items():
        assert {"--log-level", "--version"} <= set(p._option_string_actions), name


def _http_request_logged(caplog: pytest.LogCaptureFixture) -> bool:
    caplog.clear()
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(204))) as c:
        c.get("http://service.invalid/healthz")
    return any("HTTP Request:" in r.getMessage() for r in caplog.records)


def test_http_request_lines_only_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    cli.configure_logging("INFO")
    assert not _http_request_logged(caplog)
    assert not logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO)
    cli.configure_logging("WARNING")
    assert not _http_request_logged(caplog)
    cli.configure_logging("DEBUG")
    assert _http_request_logged(caplog)
    assert logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO)


@pytest.mark.parametrize("argv,access_log", [([], False), (["--log-level", "debug"], True)])
def test_serve_turns_the_access_log_on_only_at_debug(tmp_path: Path, argv: list[str],
                                                     access_log: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    config = tmp_path / "gpuhealth.yaml"
    config.write_text(f"storage:\n  data_dir: {tmp_path / 'data'}\n"
                      "collectors:\n  auto: false\n")
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    assert cli.main(["serve", "--config", str(config), *argv]) == 0
    assert seen["access_log"] is access_log and seen["log_config"] is None
