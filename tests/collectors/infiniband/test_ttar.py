"""unpack_ttar: the real procfs archive and the format's corner cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.infiniband import unpack_ttar
from tests.collectors.infiniband.trees import TTAR, TTAR_ROOT, needs_ttar


@needs_ttar
def test_real_archive(tmp_path: Path) -> None:
    written = unpack_ttar(TTAR.read_bytes(), tmp_path)
    assert len(written) > 2000
    ib = tmp_path / TTAR_ROOT
    assert (ib / "mlx4_0" / "ports" / "2" / "rate").read_text() == "40 Gb/sec (4X QDR)\n"
    # Two-line file (a trailing blank line in the capture) kept as is.
    assert (ib / "mlx4_0" / "ports" / "2" / "link_layer").read_text() == "InfiniBand\n\n"
    # NULLBYTE and a final EOF (no trailing newline).
    assert (tmp_path / "fixtures/proc/26231/cmdline").read_bytes() == b"vim\0test.go\0+10\0"
    assert (tmp_path / "fixtures/proc/26231/exe").is_symlink()


def test_small_archive(tmp_path: Path) -> None:
    text = (
        "# comment\n"
        "Directory: a\nMode: 755\n"
        "# ttar - - -\n"
        "Path: a/empty\nLines: 0\nMode: 644\n"
        "Path: a/two\nLines: 2\nx\ny\nMode: 644\n"
        "Path: a/noeol\nLines: 1\nzEOF\nMode: 444\n"
        "Path: a/link\nSymlinkTo: two\n"
    )
    unpack_ttar(text, tmp_path)
    assert (tmp_path / "a/empty").read_bytes() == b""
    assert (tmp_path / "a/two").read_text() == "x\ny\n"
    assert (tmp_path / "a/noeol").read_text() == "z"
    assert (tmp_path / "a/link").read_text() == "x\ny\n"


@pytest.mark.parametrize(("text", "message"), [
    ("Path: ../evil\nLines: 1\nx\n", "leaves the destination"),
    ("Path: /etc/evil\nLines: 1\nx\n", "leaves the destination"),
    ("Path: f\nLines: 3\nx\n", "cut short: 'f' .* announces 3 lines, the archive holds 1"),
    ("Lines: 1\nx\n", "without a 'Path'"),
    ("Bogus: 1\n", "unknown header"),
    ("just text\n", "expected 'Key: value'"),
    ("Path: out\nSymlinkTo: /\nPath: out/new/f\nLines: 1\nx\n", "outside the destination"),
    ("Path: out\nSymlinkTo: /\nDirectory: out/new\n", "outside the destination"),
])
def test_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        unpack_ttar(text, tmp_path / "dest")
