"""Unpack a ttar text archive (the format of prometheus' `ttar` tool) into a directory.

    Directory: <path>        a directory
    Path: <path>             a regular file, followed by
    Lines: <n>               its n lines; `NULLBYTE` stands for a NUL byte, and a trailing
                             `EOF` on the last line means the file has no final newline
    SymlinkTo: <target>      (after Path:) a symbolic link instead of a file
    Mode: <octal>            permissions (not applied: the trees are read by tests and tools)
    # ...                    comments and separators

Paths must stay inside the destination: absolute paths, `..` and writes through a symlink that
points outside are refused with ValueError, since the archive is data from elsewhere.

An archive cut short (a copy or an upload that stopped) ends inside an entry: a file with fewer
lines than its `Lines:` announces, or whose last line has no newline, or a `Path:` with nothing
after it. Such an entry is never written (part of a counter file is a wrong number, not a
smaller one); the entries before it are. The reason goes to `refused` when the caller gives
one, else it is a ValueError.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

_NUL = b"NULLBYTE"
_EOF = b"EOF"


def unpack_ttar(text: str | bytes, dest_dir: Path,
                refused: list[str] | None = None) -> list[Path]:
    """Write the archive's tree under dest_dir; returns the files and links written.

    Give bytes (or a str read with newline="") when files may hold binary data: universal
    newline translation would turn a lone CR inside a file into a line break and shift every
    `Lines:` count after it."""
    dest = dest_dir.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: nothing, in a whole archive
    written: list[Path] = []
    path: Path | None = None
    name = ""

    def cut(why: str) -> list[Path]:
        reason = f"ttar archive cut short: {why}; the entry is not written"
        if refused is None:
            raise ValueError(reason)
        refused.append(reason)
        return written

    i = 0
    while i < len(lines):
        line = lines[i].decode("utf-8", "replace")
        i += 1
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            raise ValueError(f"ttar line {i}: expected 'Key: value', got {line!r}")
        if key == "Directory":
            d = _inside(dest, value, i)
            if not d.resolve().is_relative_to(dest):
                raise ValueError(f"ttar line {i}: {value!r} would be written outside the "
                                 "destination")
            d.mkdir(parents=True, exist_ok=True)
            path = None
        elif key == "Path":
            path, name = _inside(dest, value, i), value
        elif key == "Lines":
            if path is None:
                raise ValueError(f"ttar line {i}: 'Lines' without a 'Path'")
            n = _count(value, i)
            if i + n > len(lines):
                part = " and part of one more" if tail else ""
                return cut(f"{name!r} (line {i}) announces {n} lines, the archive holds "
                           f"{len(lines) - i}{part}")
            body = lines[i : i + n]
            i += n
            _write(path, body)
            written.append(path)
            path = None
        elif key == "SymlinkTo":
            if path is None:
                raise ValueError(f"ttar line {i}: 'SymlinkTo' without a 'Path'")
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.exists():
                path.unlink()
            os.symlink(value, path)
            written.append(path)
            path = None
        elif key == "Mode":
            _count(value, i, base=8)
        else:
            raise ValueError(f"ttar line {i}: unknown header {key!r}")
    if path is not None:
        return cut(f"it ends after 'Path: {name}', before the file's contents")
    if tail:
        return cut(f"it ends in a partial line {tail[:40].decode('utf-8', 'replace')!r}")
    return written


def _inside(dest: Path, name: str, line: int) -> Path:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"ttar line {line}: path {name!r} leaves the destination")
    path = dest.joinpath(*rel.parts)
    # A symlink from earlier in the archive could point anywhere; check before creating
    # anything, since mkdir(parents=True) would follow it.
    if not path.parent.resolve().is_relative_to(dest):
        raise ValueError(f"ttar line {line}: {name!r} would be written outside the destination")
    return path


def _count(value: str, line: int, base: int = 10) -> int:
    try:
        n = int(value, base)
    except ValueError:
        raise ValueError(f"ttar line {line}: {value!r} is not a number") from None
    if n < 0:
        raise ValueError(f"ttar line {line}: negative count {n}")
    return n


def _write(path: Path, body: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(s + b"\n" for s in body)
    if body and body[-1].endswith(_EOF):
        data = data[: -len(_EOF) - 1]
    path.write_bytes(data.replace(_NUL, b"\0"))
