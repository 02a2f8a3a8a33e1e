"""The gate's decisions without a scheduler (a site that answers from a table, runs inline):
the failure class a drain's summary names, a round that stops at its first failure, a pass
that releases, an error that says why, and runs a lost runner left marked running."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from collectors.frames import Batch
from service.diagnostics.gate import STALE_MARGIN_S, Diagnostics, failure_class
from service.diagnostics.runs import RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.site import Purpose, Ran
from service.remediation.actions import Action, ActionState, AuditEntry

CAPTURES = Path(__file__).resolve().parents[1] / "collectors" / "captures" / "diagnostics"
PASS = (CAPTURES / "nccl" / "all-reduce-8xh100-pass.txt").read_text()
SLOW = (CAPTURES / "nccl" / "all-reduce-8xh100-slow.txt").read_text()


class Inline:
    """An executor that runs what it is given at once (the round, in the test's thread)."""

    def submit(self, fn: Any, *args: Any) -> Future[None]:
        fut: Future[None] = Future()
        fn(*args)
        fut.set_result(None)
        return fut


class Table:
    name = "table"

    def __init__(self) -> None:
        self.answers: dict[str, Ran] = {}
        self.calls: list[tuple[str, str, Purpose]] = []

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        self.calls.append((node, argv[0], purpose))
        return self.answers[argv[0]]


def drain(summary: str, node: str = "n1") -> Action:
    return Action(id=f"act-{node}", kind="migrate", episode="1", node=node, alert_id=1,
                  fingerprint="fp", summary=summary, mode="auto", state=ActionState.SUCCEEDED,
                  requested_at=0.0, deadline=None, drained=True)


@pytest.fixture
def parts() -> tuple[Diagnostics, Table, list[AuditEntry], list[Batch], list[str]]:
    settings = DiagnosticsServiceSettings.model_validate({
        "enabled": True,
        "suites": {"nccl": {"command": ["nccl"], "parser": "nccl_tests", "timeout_s": 60,
                            "expected": {"H100": {"busbw_gbps": 400}}},
                   "nccl_again": {"command": ["again"], "parser": "nccl_tests",
                                  "timeout_s": 60}},
        "gate": {"nvlink": ["nccl", "nccl_again"], "default": ["nccl"]}})
    site, released = Table(), []
    audit: list[AuditEntry] = []
    published: list[Batch] = []
    diag = Diagnostics(settings, RunStore(":memory:"), site, audit=audit.append,
                       publish=published.append, executor=Inline(),  # type: ignore[arg-type]
                       clock=lambda: 1000.0)
    diag.release = lambda node, actor, now: released.append(node)
    return diag, site, audit, published, released


@pytest.mark.parametrize(("summary", "cls"), [
    ("dbe: uncorrectable ECC error in HBM", "memory"), ("Xid 48 on GPU 3", "memory"),
    ("remap_failure: spare rows exhausted", "memory"), ("nvlink_down: link 4", "nvlink"),
    ("Xid 74: NVLink error", "nvlink"), ("ib_port_down: mlx5_3 port 1", "network"),
    ("near_shutdown: 2 degC from shutdown", "default")])
def test_the_failure_class_comes_from_the_drains_summary(summary: str, cls: str) -> None:
    assert failure_class(summary) == cls


def test_a_round_stops_at_its_first_failure_and_keeps_the_node(parts: Any) -> None:
    diag, site, audit, published, released = parts
    site.answers = {"nccl": Ran(exit_code=0, stdout=SLOW), "again": Ran(exit_code=0,
                                                                        stdout=PASS)}
    why = diag.check(drain("nvlink_down: link 4"), "alice", 1000.0)
    assert why is not None and why.startswith("started nccl, nccl_again on n1")
    assert [c[1] for c in site.calls] == ["nccl"]  # the second suite never ran
    assert [r.status for r in diag.runs.for_drain("act-n1")] == ["fail"]
    assert [e.event for e in audit] == ["gate_started", "gate_failed"]
    assert "busbw_gbps" in audit[-1].result and "stays drained" in audit[-1].result
    assert published[-1].events.values == [3.0]  # P2P bandwidth
    assert released == []


def test_a_round_that_passes_releases_and_a_later_ask_is_let_through(parts: Any) -> None:
    diag, site, audit, _, released = parts
    site.answers = {"nccl": Ran(exit_code=0, stdout=PASS), "again": Ran(exit_code=0,
                                                                        stdout=PASS)}
    d = drain("nvlink_down: link 4")
    assert diag.check(d, "alice", 1000.0) is not None
    assert released == ["n1"]
    assert diag.check(d, "gate", 1000.0) is None  # the release's own ask
    assert [e.event for e in audit] == ["gate_started", "gate_passed"]


def test_a_test_that_could_not_run_says_why_and_publishes_nothing(parts: Any) -> None:
    diag, site, audit, published, released = parts
    site.answers = {"nccl": Ran(refused="n1 has 1 job(s) on it (42); not testing it")}
    diag.check(drain("near_shutdown"), "alice", 1000.0)
    [run] = diag.runs.for_drain("act-n1")
    assert run.status == "error" and run.result is not None and "job(s)" in run.result.error
    assert audit[-1].event == "gate_error" and "ask for its release again" in audit[-1].result
    assert published == [] and released == []


def test_runs_a_lost_runner_left_running_end_as_errors_after_their_time(parts: Any) -> None:
    diag, _, _, _, _ = parts
    run = diag.runs.start("n1", "nccl", Purpose.GATE, "act-n1", "table", 100.0)
    assert diag.expire(100.0 + 60 + STALE_MARGIN_S - 1) == []  # maybe another replica's
    [gone] = diag.expire(100.0 + 60 + STALE_MARGIN_S + 1)
    assert gone.id == run.id and gone.status == "error"
    assert gone.result is not None and "interrupted" in gone.result.error
