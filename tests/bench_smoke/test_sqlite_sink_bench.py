"""The SQLite sink benchmark runs end to end at a tiny size and reports both write paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sqlite_sink import main, run


def test_both_write_paths_are_timed_on_the_same_rounds(tmp_path: Path) -> None:
    old, wide, new = run(16, 4, tmp_path)
    assert (old.name, wide.name, new.name) == ("old (every row)", "change-only, wide",
                                               "change-only, packed")
    assert wide.rows == new.rows  # the same rows, written wide or packed
    # 16 GPUs: 16 GPU rows, 16 * 18 links, 2 nodes * 8 ports: all written every round by the
    # old path; the new one skips the links, whose counters do not move.
    assert old.rows == 16 + 16 * 18 + 16
    assert new.rows < old.rows / 4
    assert old.seconds > 0 and new.seconds > 0 and old.mb_per_hour > 0


def test_the_command_prints_both_and_the_ratio(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "8", "--rounds", "3", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "old (every row)" in out and "change-only, packed" in out
    assert "old (every row) / change-only, packed:" in out
