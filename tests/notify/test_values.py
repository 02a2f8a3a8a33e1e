"""A signal's value in words in messages: a state by its name, a measure with its unit, an Xid
by its number; an unknown rule reads as the number."""

from __future__ import annotations

import math

import pytest

from service.notify.receivers.render import signal_text
from service.notify.values import value_text


@pytest.mark.parametrize(("rule", "value", "text"), [
    ("ib_port_down", 1.0, "DOWN"), ("ib_port_down", 4.0, "ACTIVE"),
    ("nvlink_down", 0.0, "inactive"), ("gpu_unreadable", 3.0, "lost"),
    ("psu_redundancy_lost", 0.0, "lost"), ("dbe", 2.0, "2 errors"),
    ("near_shutdown", 1.5, "1.5 °C"), ("xid", 79.0, "Xid 79"), ("ib_rate_low", 200.0, "200 Gb/s"),
    ("some_new_rule", 0.4213, "0.4213"), ("ib_port_down", 9.0, "9"), ("dbe", None, "n/a"),
    ("dbe", math.nan, "n/a"),
])
def test_values_read_in_words(rule: str, value: float | None, text: str) -> None:
    assert value_text(rule, value) == text


def test_a_message_line_names_the_state_and_its_expected_one() -> None:
    line = signal_text({"rule": "ib_port_down", "signal": "IB port state, not active for 60s",
                        "value": 1.0, "threshold": 4.0, "risk": 1.0, "hard": True})
    assert line == ("ib_port_down: IB port state, not active for 60s = DOWN "
                    "(threshold ACTIVE), risk 1 [hard]")
    xid = signal_text({"rule": "xid", "signal": "Xid 79 (GPU has fallen off the bus)",
                       "value": 79.0, "threshold": math.nan})
    assert xid == "xid: Xid 79 (GPU has fallen off the bus) = Xid 79"
