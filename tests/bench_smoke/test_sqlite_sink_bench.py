"""The SQLite sink benchmark runs end to end at a tiny size and reports the write path."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sqlite_sink import main, run


def test_the_write_path_is_timed_and_writes_only_what_moved(tmp_path: Path) -> None:
    f = run(16, 4, tmp_path)
    assert f.name == "change-only, packed"
    # 16 GPUs: 16 GPU rows, 16 * 18 links, 2 nodes * 8 ports a round; the links' counters do
    # not move, so after the first round they are not written again.
    assert 0 < f.rows < 16 + 16 * 18 + 16
    assert f.rows < (16 + 16 * 18 + 16) / 4
    assert f.seconds > 0 and f.cpu >= 0 and f.mb_per_hour > 0


def test_the_command_prints_the_figures(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "8", "--rounds", "3", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "8 GPUs, 3 rounds" in out and "change-only, packed" in out
