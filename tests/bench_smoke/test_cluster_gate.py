"""bench.cluster's failover gate, judged on made-up rounds and probe answers: each round-level
failure (no notification, a failure not paged, a lost resolve, a page carried twice, a page
later than two ticks after the lease moved) breaks an invariant of its own, and the probe's
reading finds two leaders, a leader the shared state does not name, and a last_notified that
never moved."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.cluster_agents import Failure
from bench.cluster_failover import FailoverResult, Round
from bench.cluster_probe import (
    Seen,
    double_claims,
    instant,
    notified_moved,
    stale_claims,
    wrong_holder,
)
from bench.cluster_verdict import failover, truth

T = 1_000_000.0
FAILURES = [Failure("ha000", 0, "dbe"), Failure("ha001", 0, "xid79")]


def good(i: int, kind: str = "kill") -> Round:
    t = T + 100 * i
    return Round(kind=kind, victim=f"ha-{i % 2}", to=f"ha-{(i + 1) % 2}", epoch=i + 1,
                 started=t, lost_at=t + 10, lease_s=12.0, notify_s=22.0, acquired_at=t + 21.5,
                 page_at=t + 31.0, ended=t + 80, breaker_kept=True, failures=list(FAILURES),
                 paged=2, resolved=2, duplicates=0)


def result(*rounds: Round) -> FailoverResult:
    return FailoverResult(rounds=list(rounds), failures=[], epochs=[r.epoch for r in rounds])


def broken(res: FailoverResult) -> set[str]:
    return {c.name for c in failover(res, len(res.rounds)) if not c.ok}


def test_good_rounds_hold_every_invariant() -> None:
    assert broken(result(good(0), good(1), good(2))) == set()


def test_each_round_level_failure_breaks_its_own_invariant() -> None:
    cases: dict[str, dict[str, Any]] = {
        "first notification after the kill": {"notify_s": None},
        "failover rounds: every failure paged": {"paged": 1},
        "failover rounds: every resolve delivered": {"resolved": 1},
        "failover rounds: no page carried twice": {"duplicates": 1},
        "paged within two ticks of taking the lease": {"page_at": T + 100 + 21.5 + 11.5},
        "failovers completed": {"lease_s": None},
    }
    for name, change in cases.items():
        got = broken(result(good(0), replace(good(1), **change), good(2)))
        assert name in got, f"{change} did not break {name!r}: {got}"
    never = broken(result(good(0), replace(good(1), page_at=None)))
    assert "paged within two ticks of taking the lease" in never


def test_the_partition_round_is_fenced() -> None:
    ok = replace(good(2, "partition"), continued_at=T + 235, answer_s=0.4, answer_leading=False)
    assert broken(result(good(1), ok)) == set()
    late = replace(ok, old_sent_after_continue=1)
    assert "partition: the old leader sent nothing after the new lease" in broken(
        result(good(1), late))
    leads = replace(ok, answer_leading=True)
    assert "partition: the old leader says it does not lead once continued" in broken(
        result(good(1), leads))


def test_the_starting_round_needs_the_starting_replica() -> None:
    ok = replace(good(0, "starting"), still_starting=True)
    assert broken(result(ok)) == set()
    assert "starting round: the replica still starting took the lease" in broken(
        result(replace(ok, still_starting=False)))


def seen(replica: str, asked: float, *, leading: bool, since: float | None,
         holder: str = "", sweep: int = 0, pager: float | None = None) -> Seen:
    mine = holder == replica
    return Seen(sweep, asked, replica, "cluster", leading, leading, since if leading else None,
                holder, mine, since, pager)


def test_the_probe_finds_a_stale_leader() -> None:
    a_leads = seen("ha-0", T + 5, leading=True, since=T, holder="ha-0")
    b_took = seen("ha-1", T + 20, leading=True, since=T + 18, holder="ha-1", sweep=1)
    a_after = seen("ha-0", T + 21, leading=True, since=T, holder="ha-1", sweep=1)
    assert stale_claims([a_leads, b_took], []) == []
    assert stale_claims([a_leads, b_took, a_after], []) == [a_after]
    # An acquisition the rounds measured counts even when no answer named it.
    assert stale_claims([a_leads, replace(a_leads, asked=T + 30)], [T + 25]) != []
    assert double_claims([b_took, a_after]) == 1
    assert wrong_holder([a_leads, b_took, a_after]) == [a_after]


def test_last_notified_must_move_past_the_loss() -> None:
    before = seen("ha-1", T + 40, leading=True, since=T + 18, holder="ha-1", pager=T + 5)
    after = replace(before, asked=T + 45, pager_last=T + 31)
    assert not notified_moved([before], T + 10, T + 31, T + 80)
    assert notified_moved([before, after], T + 10, T + 31, T + 80)
    rnd = replace(good(0), lost_at=T + 10, page_at=T + 31, ended=T + 80, acquired_at=T + 18)
    names = {c.name: c.ok for c in truth([before], result(rnd))}
    assert names["/v1/cluster: last_notified moved after each round's page"] is False
    names = {c.name: c.ok for c in truth([before, after], result(rnd))}
    assert all(names.values()), names


def test_the_probe_reads_both_time_forms() -> None:
    assert instant("2026-12-07T14:52:19.800Z") == instant(1796655139.8) == 1796655139.8
    assert instant(None) is None
