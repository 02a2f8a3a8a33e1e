from __future__ import annotations

import pytest

from collectors.nvidia_smi.values import Refused, reading, value


@pytest.mark.parametrize(("raw", "expected"), [
    ("27 C", 27.0), ("67.03 W", 67.03), ("1275 MHz", 1275.0), ("0 %", 0.0), ("-7 C", -7.0),
    ("192 bank(s)", 192.0), ("353", 353.0),
    ("Active", 1.0), ("Not Active", 0.0), ("Yes", 1.0), ("No", 0.0),
    ("Enabled", 1.0), ("Disabled", 0.0),
])
def test_readings(raw: str, expected: float) -> None:
    assert value(raw) == expected


@pytest.mark.parametrize("raw", [
    None, "", "N/A", "[N/A]", "[Not Supported]", "Not Supported",
    "[Requested functionality has been deprecated]", "0x00000000000001FF", "P0", "Default",
])
def test_absent_or_unsupported_is_none_not_zero(raw: str | None) -> None:
    assert value(raw) is None


@pytest.mark.parametrize("raw", ["9" * 400, "-" + "9" * 400 + " W", "9" * 20 + " MiB",
                                 "9223372036854775808"])
def test_numbers_beyond_any_reading_are_refused_with_a_reason(raw: str) -> None:
    got = reading(raw)
    assert isinstance(got, Refused) and "is out of range" in got
    assert value(raw) is None  # left out, never infinity, never an exception


def test_the_largest_plausible_readings_are_kept() -> None:
    assert reading("9223372036854774784") == 9223372036854774784.0  # just under 2**63
    assert reading("81559 MiB") == 81559.0
