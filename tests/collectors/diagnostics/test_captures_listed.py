"""Every diagnostics capture is named in own_captures.py and described in captures/README.md."""

from __future__ import annotations

from pathlib import Path

from tests.collectors import own_captures
from tests.collectors.own_captures import CAPTURES, DIAG


def test_every_capture_is_named_and_described() -> None:
    files = sorted(p for p in DIAG.rglob("*") if p.is_file())
    assert len(files) >= 20
    named = {v for v in vars(own_captures).values() if isinstance(v, Path)}
    readme = (CAPTURES / "README.md").read_text(encoding="utf-8")
    assert [p for p in files if p not in named] == []
    assert [p for p in files if f"`{p.relative_to(CAPTURES).as_posix()}`" not in readme] == []
