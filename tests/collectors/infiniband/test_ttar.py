"""unpack_ttar: the real procfs archive and the format's corner cases."""

from __future__ import annotations

import re
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


# A small IB tree as ttar writes it (our own archive), to cut at every byte.
_PORT = "sys/class/infiniband/mlx5_0/ports/1"
SMALL = (
    "# Archive created by ttar -c -f ib.ttar sys/\n"
    f"Directory: {_PORT}\nMode: 755\n"
    "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"
    f"Path: {_PORT}/state\nLines: 1\n4: ACTIVE\nMode: 444\n"
    "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"
    f"Path: {_PORT}/rate\nLines: 1\n400 Gb/sec (4X NDR)\nMode: 444\n"
    "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"
    f"Path: {_PORT}/counters/symbol_error\nLines: 1\n123456\nMode: 444\n"
)


@pytest.mark.parametrize(("cut_after", "kept", "why"), [
    ("123", ["state", "rate"], "counters/symbol_error' .* announces 1 lines, the archive "
                              "holds 0 and part of one more"),
    ("400 Gb/s", ["state"], "/rate' .* announces 1 lines"),
    (f"Path: {_PORT}/counters/symbol_error\n", ["state", "rate"],
     "ends after 'Path: .*symbol_error', before the file's contents"),
    (f"Path: {_PORT}/counters/symbol_error\nLin", ["state", "rate"],
     "ends after 'Path: .*symbol_error', before the file's contents"),
    ("Mode: 444\n# ttar - -", ["state"], "ends in a partial line '# ttar - -'"),
])
def test_an_archive_cut_mid_entry_keeps_the_whole_entries(tmp_path: Path, cut_after: str,
                                                          kept: list[str], why: str) -> None:
    text = SMALL[:SMALL.index(cut_after) + len(cut_after)]
    refused: list[str] = []
    written = unpack_ttar(text, tmp_path, refused)
    assert sorted(p.name for p in written) == sorted(kept)
    [reason] = refused
    assert re.search("ttar archive cut short: .*" + why + ".*; the entry is not written", reason)
    # Nothing of the cut entry is on disk: a partial count is a wrong count, not a smaller one.
    assert not (tmp_path / _PORT / "counters" / "symbol_error").exists()
    with pytest.raises(ValueError, match="cut short"):
        unpack_ttar(text, tmp_path / "strict")


def test_every_cut_of_a_small_archive_is_refused_or_whole(tmp_path: Path) -> None:
    for n in range(len(SMALL) + 1):
        refused: list[str] = []
        written = unpack_ttar(SMALL[:n], tmp_path / str(n), refused)
        whole = {"state": "4: ACTIVE\n", "rate": "400 Gb/sec (4X NDR)\n",
                 "symbol_error": "123456\n"}
        assert all(p.read_text() == whole[p.name] for p in written), n
        if n and SMALL[n - 1] != "\n":  # cut inside a line: always said
            assert refused, n


@needs_ttar
def test_the_real_archive_cut_in_a_counter_keeps_what_came_before(tmp_path: Path) -> None:
    data = TTAR.read_bytes()
    marker = b"/ports/1/counters/symbol_error\nLines: 1\n"
    at = data.index(marker) + len(marker) + 1  # one byte into the count
    refused: list[str] = []
    written = unpack_ttar(data[:at], tmp_path, refused)
    assert len(refused) == 1 and "symbol_error" in refused[0]
    assert written and all(p.name != "symbol_error" or p.parent.parent.name != "1"
                           or p.read_text().strip().isdigit() for p in written)
    assert len(written) < len(unpack_ttar(data, tmp_path / "whole"))
