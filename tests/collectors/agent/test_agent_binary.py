"""The self-contained agent (issue 33): `make agent-binary`'s one-file executable
(bench.agent_binary) runs a round on a node with no Python for it: `env -i` (no virtual
environment, nothing of ours on PYTHONPATH), the working directory an empty temporary one, a
fake `nvidia-smi` answering with our own captures, one GPU reading `[Unknown Error]`. Slow: the
build takes half a minute or more."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.agent_binary import NAME, build, clean_env, fake_smi, run_once
from bench.agent_node import Sink

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pytest.importorskip("PyInstaller", reason="PyInstaller is not installed (requirements-dev.txt "
                                              "pins it): the agent binary cannot be built")
    yield build(tmp_path_factory.mktemp("dist"), work=tmp_path_factory.mktemp("work"))


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    """(the fake nvidia-smi's directory, an empty working directory)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return fake_smi(tmp_path / "node"), cwd


def test_one_round_pushed_from_a_clean_environment(binary: Path,
                                                   node: tuple[Path, Path]) -> None:
    bin_dir, cwd = node
    with Sink() as sink:
        res, peak = run_once(binary, sink.url, cwd, bin_dir)
    assert res.returncode == 0, res.stderr
    assert sink.posts == 1 and sink.bytes > 0
    assert "1 rounds" in res.stderr and "1 segments sent" in res.stderr
    assert peak > 0


def test_the_unknown_error_gpu_is_data_and_the_others_read(binary: Path,
                                                          node: tuple[Path, Path]) -> None:
    bin_dir, cwd = node
    res = subprocess.run([*clean_env(bin_dir), str(binary), "--once", "--stdout", "--source",
                          "nvidia-smi", "--host", "n1", "--spool", str(cwd / "spool")],
                         cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    gpus = {x.split(",")[1]: x for x in res.stdout.splitlines() if x.startswith("gpu,")}
    assert set(gpus) == {"gpu=0", "gpu=1", "gpu=2", "gpu=4", "gpu=5"}  # 3: a handle error
    assert "gpu_unreadable=1i" in gpus["gpu=1"]  # [Unknown Error] in every reading
    assert "gpu_unreadable=2i" in gpus["gpu=2"]  # [GPU requires reset]
    assert "gpu_unreadable=0i" in gpus["gpu=0"] and "gpu_temp=41.0" in gpus["gpu=0"]
    assert "collector=nvidia_smi,host=n1 up=1i" in res.stdout


def test_it_is_the_agent_command_alone(binary: Path, node: tuple[Path, Path]) -> None:
    bin_dir, cwd = node
    res = subprocess.run([*clean_env(bin_dir), str(binary), "--help"], cwd=cwd,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert "usage: gpuhealth agent" in res.stdout and "--spool" in res.stdout
    assert binary.name == NAME
    from PyInstaller.archive.readers import CArchiveReader

    bundled = set(CArchiveReader(str(binary)).open_embedded_archive("PYZ.pyz").toc)
    assert {"collectors.agent.loop", "collectors.nvidia_smi.collector", "numpy",
            "httpx"} <= bundled
    assert not {m for m in bundled if m.partition(".")[0] in ("torch", "pyarrow", "models",
                                                              "pydantic", "fastapi")}
    assert not {m for m in bundled if m.startswith(("service.api", "service.settings"))}
