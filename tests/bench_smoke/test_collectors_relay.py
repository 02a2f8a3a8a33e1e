"""bench.collectors_relay: where in a simulated round the relays flush, and which relay each
node posts to (the bench's stand-in for the relays' --flush-ms timer in real time)."""

from __future__ import annotations

from collections import Counter

from bench.collectors_relay import flush_points, relay_of


def test_a_five_second_flush_is_once_a_round_at_its_end() -> None:
    assert flush_points(64, 5.0) == [64]


def test_a_slower_flush_still_flushes_at_the_round_end() -> None:
    assert flush_points(64, 30.0) == [64]


def test_a_one_second_flush_is_five_equal_shares_of_the_round() -> None:
    points = flush_points(64, 1.0)
    assert points == [13, 26, 38, 51, 64]


def test_a_flush_faster_than_the_requests_flushes_after_each() -> None:
    assert flush_points(3, 0.1) == [1, 2, 3]


def test_nodes_are_dealt_to_relays_in_turn_and_each_round_alike() -> None:
    per_round, relays = 64, 3
    first = [relay_of(j, per_round, relays) for j in range(per_round)]
    assert first[:4] == [0, 1, 2, 0]
    assert Counter(first) == {0: 22, 1: 21, 2: 21}
    assert [relay_of(per_round + j, per_round, relays) for j in range(per_round)] == first


def test_every_share_of_a_round_reaches_every_relay() -> None:
    """At --flush-ms 1000 each relay has nodes in each fifth of the round, as a rack's agents
    post throughout a real round: five bodies per relay per round, not fewer."""
    per_round, relays = 64, 2
    start = 0
    for end in flush_points(per_round, 1.0):
        assert {relay_of(j, per_round, relays) for j in range(start, end)} == {0, 1}
        start = end
