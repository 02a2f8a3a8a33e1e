"""Captured nvidia-smi outputs under ../shared/fixtures, read at test time (never copied).

Every test that uses them is parametrized over the directory listing, so a capture added there
is tested without touching this code; without ../shared the tests skip and say why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collectors import identity
from collectors.lineprotocol import Point

ROOT = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures"
XML_DIR = ROOT / "nvidia-smi-xml"
TEXT_DIR = ROOT / "nvidia-smi-text"
_ABSENT = f"fixtures not found at {ROOT} (the shared checkout is absent)"


def files(directory: Path, keep: Callable[[str], bool] = lambda _: True) -> list[Any]:
    """pytest params, one per matching file, ids by file name."""
    if not directory.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=_ABSENT), id="no-fixtures")]
    found = sorted(p for p in directory.iterdir() if p.is_file() and keep(p.name))
    return [pytest.param(p, id=p.name) for p in found]


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(_ABSENT if not ROOT.is_dir() else f"fixture {path.name} is missing")
    return path


def wrapper_string(path: Path, name: str) -> str:
    """A triple-quoted capture held by a python wrapper (out = '''...'''), read with ast so the
    wrapper is never executed."""
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    raise LookupError(f"{path.name} has no string {name!r}")


_SECTION = re.compile(r"^# \$ (?P<cmd>nvidia-smi[^\n]*)\n#{20,}\n(?P<body>.*?)(?=^#{20,}$|\Z)",
                      re.M | re.S)


def bundle_sections(path: Path) -> list[tuple[str, str]]:
    """(command line, output) for each section of an nvidia_gpu_exporter capture bundle."""
    return [(m["cmd"].strip(), m["body"]) for m in _SECTION.finditer(path.read_text())]


def is_query_text(name: str) -> bool:
    """Plain `nvidia-smi -q` captures (not the default table, not nvlink)."""
    return name.startswith(("gpud-nvidia-smi-query.", "azurehpc-")) and "nvlink" not in name


def is_nvlink(name: str) -> bool:
    return "nvlink" in name


def is_wrapper(name: str) -> bool:
    return name.endswith("_smi.py")


def is_bundle(name: str) -> bool:
    return name.startswith("nvidia_gpu_exporter-capture-")


def readings(points: list[Point]) -> list[Point]:
    """A parser's points without the `gpu_info` (identity) ones: the readings."""
    return [p for p in points if p.measurement != identity.MEASUREMENT]


def infos(points: list[Point]) -> dict[str, dict[str, object]]:
    """A parser's `gpu_info` points: GPU index -> identity fields."""
    return {p.tags["gpu"]: dict(p.fields) for p in points
            if p.measurement == identity.MEASUREMENT}
