"""Integers a request names, bounded to what the stores hold: SQLite and PostgreSQL keep
integers in 64 bits, and a Python int past that raised OverflowError inside a query (a 500).
Every integer path or query parameter is one of these types, so a number out of range is the
caller's error (422, naming the parameter) before any store sees it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# An alert's id (ids start at 1).
AlertId = Annotated[int, Path(ge=1, le=I64_MAX, description="the alert's id")]


def in_range(value: int) -> bool:
    """Whether `value` fits a 64-bit store column (for numbers read from elsewhere: cursors)."""
    return I64_MIN <= value <= I64_MAX

