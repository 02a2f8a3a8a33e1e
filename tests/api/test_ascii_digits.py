"""Digits that `str.isdigit` takes and `int` refuses (`²`) are no number anywhere a sender's text
is read as one (issue 29, defect 10): before, each of these raised ValueError (a 500 or a crash)."""

from __future__ import annotations

import httpx

from collectors.agent.push import retry_after
from collectors.trace import _part_number
from service.api.fleet import _index


def test_gpu_index_with_a_superscript_digit_sorts_last() -> None:
    assert _index("n1:gpu²") == (1 << 30, "n1:gpu²")
    assert _index("n1:gpu3") == (3, "n1:gpu3")


def test_trace_part_with_a_superscript_digit_is_no_part() -> None:
    assert _part_number("trace-².lp", "trace") is None
    assert _part_number("trace-12.lp", "trace") == 12


def test_retry_after_with_a_superscript_digit_is_no_wait() -> None:
    sup = httpx.Response(503, headers=[(b"Retry-After", "²".encode("latin-1"))])
    assert retry_after(sup) is None
    assert retry_after(httpx.Response(503, headers={"Retry-After": "7"})) == 7.0
