"""The light node agent (issue 17): `gpuhealth agent` and `parse` run with only the agent's
dependencies. Each run is a fresh interpreter from the source tree in which every module an
agent-only install lacks (torch, SciPy, FastAPI, pydantic...) fails to import, as if not
installed (bench.agent_node.AGENT_ONLY); the service's commands then say what to install."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bench.agent_node import AGENT_ONLY, NOT_IN_AGENT, Sink, fake_nvidia_smi
from service.commands import cli

REPO = Path(__file__).resolve().parents[2]
with (REPO / "pyproject.toml").open("rb") as _f:
    PROJECT = tomllib.load(_f)["project"]

# Distribution -> import name, for the server extra's distributions.
IMPORT_NAME = {"scikit-learn": "sklearn", "PyYAML": "yaml", "APScheduler": "apscheduler",
               "pydantic-settings": "pydantic_settings", "nvidia-ml-py": "pynvml",
               "fastapi-offline": "fastapi_offline", "google-re2": "re2"}
HEAVY = {"torch", "scikit-learn", "scipy", "matplotlib", "kubernetes", "fastapi", "uvicorn"}


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]


def _agent_only(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = fake_nvidia_smi(tmp_path / "node", gpus=2)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-c", AGENT_ONLY, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _imported(stderr: str) -> set[str]:
    line = next(x for x in stderr.splitlines() if x.startswith("imported: "))
    return set(json.loads(line.removeprefix("imported: ")))


def test_the_agent_install_leaves_the_heavy_set_out() -> None:
    agent = [_dist(r) for r in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["agent"]]
    assert not HEAVY & set(agent), agent
    assert {"numpy", "httpx"} <= set(agent)
    server = {_dist(r) for r in PROJECT["optional-dependencies"]["server"]}
    assert server >= HEAVY
    # the stand-in for "not installed" blocks every server-only distribution
    for dist in server - set(agent):
        assert IMPORT_NAME.get(dist, dist) in NOT_IN_AGENT, dist


def test_every_dependency_is_pinned_in_requirements() -> None:
    pinned = {_dist(line).lower().replace("_", "-")
              for line in (REPO / "requirements.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    named = PROJECT["dependencies"] + [r for rs in PROJECT["optional-dependencies"].values()
                                       for r in rs]
    for r in named:
        assert _dist(r).lower().replace("_", "-") in pinned, r


def test_command_table_names_what_each_module_registers() -> None:
    cli.build_parser()  # imports every command module
    listed = {name: module for module, names in cli.COMMAND_MODULES.items() for name in names}
    registered = {name: cmd.run.__module__ for name, cmd in cli.COMMANDS.items()
                  if cmd.run.__module__ != cli.__name__}
    assert listed == registered


@pytest.mark.parametrize("argv", [["agent", "--help"], ["--log-level", "debug", "agent", "-h"],
                                  ["agent", "--log-level", "warning", "--help"]])
def test_agent_help_needs_no_server_dependency(argv: list[str], tmp_path: Path) -> None:
    res = _agent_only(argv, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "--url" in res.stdout and "--spool" in res.stdout
    assert not _imported(res.stderr) & set(NOT_IN_AGENT)


def test_one_round_to_stdout_without_server_dependencies(tmp_path: Path) -> None:
    res = _agent_only(["agent", "--once", "--stdout", "--source", "nvidia-smi", "--host", "n7",
                       "--spool", str(tmp_path / "spool")], tmp_path)
    assert res.returncode == 0, res.stderr
    gpus = [x for x in res.stdout.splitlines() if x.startswith("gpu,")]
    assert {x.split(",")[1] for x in gpus} == {"gpu=0", "gpu=1"}
    assert all("host=n7" in x for x in gpus)
    assert "numpy" in _imported(res.stderr)


def test_one_round_pushed_without_server_dependencies(tmp_path: Path) -> None:
    with Sink() as sink:
        res = _agent_only(["agent", "--once", "--source", "nvidia-smi", "--url", sink.url,
                           "--spool", str(tmp_path / "spool")], tmp_path)
    assert res.returncode == 0, res.stderr
    assert sink.posts == 1 and sink.bytes > 0
    assert "1 segments sent" in res.stderr


def test_parse_runs_without_server_dependencies(tmp_path: Path) -> None:
    capture = REPO / "tests" / "collectors" / "captures" / "nvidia-smi" / "query-x-h100x2-v12.xml"
    res = _agent_only(["parse", "nvidia-smi", str(capture)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("gpu,gpu=0")


def test_server_commands_say_what_to_install(tmp_path: Path) -> None:
    listing = _agent_only(["--help"], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"agent\s+run collectors", listing.stdout)
    assert re.search(r"demo\s+\(not available: needs the service's dependencies",
                     listing.stdout)
    for argv in (["demo", "--speed", "0"], ["serve"], ["token", "list"]):
        res = _agent_only(argv, tmp_path)
        assert res.returncode == 2, (argv, res.stderr)
        assert f"gpuhealth {argv[0]}: needs " in res.stderr, res.stderr
        assert "pip install 'gpuhealth[server]'" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("argv", "named"), [
    (["agent", "--once"], "agent"), (["--log-level", "debug", "parse", "x"], "parse"),
    (["--log-level=debug", "demo"], "demo"), (["--help"], None), ([], None)])
def test_the_named_command_is_found_before_parsing(argv: list[str], named: str | None) -> None:
    assert cli._named_command(argv) == named
