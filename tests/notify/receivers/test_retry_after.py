"""A far end's Retry-After: delta-seconds in ASCII digits or an HTTP date; anything else (`²`,
which `str.isdigit` calls a digit and `float` refuses) is no hint, never an exception in the
sender (issue 29, defect 10)."""

from __future__ import annotations

import pytest

from service.notify.receivers._common import retry_after_s


@pytest.mark.parametrize(("value", "want"), [
    ("12", 12.0), (" 7 ", 7.0), ("Thu, 01 Jan 1970 00:01:40 GMT", 100.0), (None, None),
    ("", None), ("\u00b2", None), ("\uff11\uff12", None), ("\u0661", None), ("soon", None),
])
def test_retry_after_is_ascii_seconds_or_a_date(value: str | None, want: float | None) -> None:
    assert retry_after_s(value, now=0.0) == want
