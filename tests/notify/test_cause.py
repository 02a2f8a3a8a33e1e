"""An alert's cause in a few characters, first in its summary (what `sinfo -R` and a pager's
lock screen show of a line)."""

from __future__ import annotations

import pytest

from service.notify.cause import MAX_CAUSE, short_cause


@pytest.mark.parametrize(("entity", "rule", "value", "cause"), [
    ("n1:gpu3", "dbe", 1.0, "DBE gpu3"),
    ("n1:gpu1", "xid", 79.0, "Xid79 gpu1"),
    ("n1:mlx5_2:1", "ib_port_down", 1.0, "IB mlx5_2"),
    ("n1:psuPSU2", "psu_failed", 3.0, "PSU psuPSU2"),
    ("n1", "sxid", 12028.0, "SXid12028"),
    ("n1", "diag_p2p_bandwidth", 3.0, "DiagP2P"),
    ("n1:gpu0:l4", "nvlink_down", 1.0, "NVLink gpu0"),
    ("n1:gpu0", "a_rule_nobody_named_yet", 1.0, "a_rule_nobod"),
])
def test_the_cause_is_the_rule_in_operator_words_and_the_device(
        entity: str, rule: str, value: float, cause: str) -> None:
    got = short_cause(entity, {"rule": rule, "value": value})
    assert got == cause and len(got) <= MAX_CAUSE


def test_no_signal_is_no_cause() -> None:
    assert short_cause("n1:gpu0", None) == "" and short_cause("n1:gpu0", {"rule": ""}) == ""
