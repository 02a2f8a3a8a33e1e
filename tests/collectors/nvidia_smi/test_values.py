from __future__ import annotations

import pytest

from collectors.nvidia_smi.values import value


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
