"""Repeat offenders: the counting on plain-float clocks (releases, drains and failed runs as
the remediation audit and the RunStore hold them), the flag and its clearing, and the gate
holding a flagged node's release instead of testing it again, with a real controller, a real
gate and real stores (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from collectors.diagnostics.result import Check, Status, build
from service.diagnostics.gate import Diagnostics
from service.diagnostics.offenders import (
    DAY,
    Failure,
    History,
    Offenders,
    OffenderSettings,
    Release,
    Replaced,
    record,
)
from service.diagnostics.runs import RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.site import Purpose, Ran
from service.remediation.actions import ActionConflict, ActionStore, AuditEntry
from service.remediation.config import RemediationSettings
from service.remediation.controller import MigrationRequest, RemediationController
from tests.remediation_controller.scheduler_model import (
    FreshTelemetry,
    SchedulerModel,
    SchedulerModelHook,
)

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
S = OffenderSettings()
CAPTURES = Path(__file__).resolve().parents[1] / "collectors" / "captures" / "diagnostics"


def drained(days: float, what: str = "n1: double-bit ECC") -> Failure:
    return Failure(T0 + days * DAY, f"drained again by act-x: {what}")


def failed_run(days: float, *gpus: int) -> Failure:
    return Failure(T0 + days * DAY, "diagnostic run 1: dcgm_r3 failed", tuple(gpus))


def rel(days: float, untested: str = "") -> Release:
    return Release(T0 + days * DAY, "act-d", untested)


def at(days: float) -> float:
    return T0 + days * DAY


# -- counting ----------------------------------------------------------------------------------

def test_no_history_no_flag() -> None:
    r = record("n1", History(), S, at(100))
    assert (r.releases, r.returns, r.returns_soon, r.returns_window, r.flagged, r.why) == (
        0, (), 0, 0, False, "")


def test_a_failure_within_seven_days_of_a_release_flags_the_node() -> None:
    h = History([rel(0)], [drained(3)])
    r = record("n1", h, S, at(4))
    assert r.flagged and (r.returns_soon, r.returns_window) == (1, 1)
    assert r.why == ("needs hardware replacement: failed again 3.0 days after its release on "
                     "2023-11-14 22:13 UTC (drained again by act-x: n1: double-bit ECC)")
    assert r.last_release_at == at(0) and r.returns[0].days == pytest.approx(3.0)


def test_failures_before_a_release_or_later_than_the_window_do_not_flag() -> None:
    # Failed before it was ever released (the drain the release ended), and 40 days after.
    h = History([rel(0)], [drained(-2), drained(40)])
    r = record("n1", h, S, at(50))
    assert not r.flagged and r.why == ""
    assert (r.returns_soon, r.returns_window) == (0, 0)
    assert [round(x.days) for x in r.returns] == [40]  # shown, but past the window


def test_two_returns_within_thirty_days_flag_it_one_does_not() -> None:
    one = History([rel(0)], [drained(12)])
    assert not record("n1", one, S, at(13)).flagged
    two = History([rel(0), rel(20)], [drained(12), failed_run(45)])
    r = record("n1", two, S, at(46))
    assert r.flagged and (r.returns_soon, r.returns_window) == (0, 2)
    assert r.why.startswith("needs hardware replacement: failed again 2 times within 30 days "
                            "of a release; the last failed again 25.0 days after its release "
                            "on 2023-12-04 22:13 UTC (diagnostic run 1: dcgm_r3 failed)")
    # Configurable: three returns needed, or none at all (soon_days still applies).
    assert not record("n1", two, OffenderSettings(replace_after=3), at(46)).flagged
    assert not record("n1", two, OffenderSettings(replace_after=0), at(46)).flagged
    soon = History([rel(0)], [drained(3)])
    assert record("n1", soon, OffenderSettings(replace_after=0), at(4)).flagged
    assert not record("n1", soon, OffenderSettings(soon_days=0), at(4)).flagged
    assert record("n1", soon, OffenderSettings(soon_days=0, replace_after=1), at(4)).flagged


def test_one_return_per_release_the_first_failure_after_it() -> None:
    # The drain and the gate's failed run on it are the same coming back.
    h = History([rel(0)], [failed_run(5, 2), drained(4), failed_run(4.5, 3)])
    r = record("n1", h, S, at(6))
    assert len(r.returns) == 1 and r.returns[0].failed_at == at(4)
    assert r.returns[0].gpus == (2, 3)
    assert r.returns[0].evidence.startswith("drained again")


def test_gpus_named_by_failing_checks_are_counted_per_gpu() -> None:
    h = History([rel(0), rel(10), rel(50)],
                [failed_run(2, 3), failed_run(25, 3, 5), failed_run(90, 5)])
    r = record("n1", h, S, at(91))
    by_gpu = {g.gpu: (g.returns_soon, g.returns_window, g.last_failed_at) for g in r.gpus}
    # GPU 3: 2 days after the first release, 15 after the second; GPU 5: 15 days after the
    # second; 40 after the third is past the window.
    assert by_gpu == {3: (1, 2, at(25)), 5: (0, 1, at(25))}


def test_an_untested_release_is_named_in_the_reason() -> None:
    h = History([rel(0, untested="customer deadline")], [drained(1)])
    r = record("n1", h, S, at(2))
    assert r.flagged and r.why.endswith("; that release skipped the gate: customer deadline")
    assert r.returns[0].as_dict()["untested"] == "customer deadline"


def test_a_replacement_forgets_what_came_before() -> None:
    h = History([rel(0), rel(10)], [drained(3), drained(12)],
                replaced=Replaced(at(5), "alice", "new board"))
    r = record("n1", h, S, at(13))
    assert r.releases == 1 and r.flagged  # only the release after it, failed 2 days on
    assert r.why.startswith("needs hardware replacement: failed again 2.0 days")
    cleared = History([rel(0)], [drained(3)], replaced=Replaced(at(5), "alice", "new board"))
    assert not record("n1", cleared, S, at(6)).flagged


def test_releases_past_the_lookback_are_forgotten() -> None:
    h = History([rel(0)], [drained(3)])
    assert record("n1", h, OffenderSettings(lookback_days=60), at(59)).flagged
    assert not record("n1", h, OffenderSettings(lookback_days=60), at(61)).flagged


def test_settings_keep_their_order() -> None:
    with pytest.raises(ValidationError, match="soon_days must not exceed window_days"):
        OffenderSettings(soon_days=10, window_days=5)
    with pytest.raises(ValidationError, match="window_days must not exceed lookback_days"):
        OffenderSettings(window_days=30, lookback_days=20)
    with pytest.raises(ValidationError):
        OffenderSettings(replace_after=-1)


# -- on the stores, with the controller and the gate -------------------------------------------

class CannedSite:
    """A site whose every run prints one capture of `dcgmi diag -j`, and remembers the call."""

    name = "canned"

    def __init__(self, capture: str) -> None:
        self.stdout = (CAPTURES / "dcgm" / capture).read_text()
        self.calls: list[str] = []

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        self.calls.append(node)
        return Ran(exit_code=0, stdout=self.stdout)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, target: str) -> None:
        self.model = SchedulerModel(4)
        self.ctl = RemediationController(
            ActionStore(target), SchedulerModelHook(self.model),
            RemediationSettings(mode="auto", release_mode="auto"), FreshTelemetry(),
            lambda: 100)
        self.clock = Clock(T0)
        self.site = CannedSite("diag-r3-pass-v4.json")
        settings = DiagnosticsServiceSettings.model_validate({
            "enabled": True, "gate": {"default": ["dcgm_r3"]}})
        self.gate = Diagnostics(settings, RunStore(target), self.site,
                                audit=self.ctl.store.append_audit, publish=lambda b: None,
                                clock=self.clock)
        self.ctl.gate = self.gate
        self.gate.release = lambda n, actor, now: self.ctl.release(n, actor, now)
        self.offenders = Offenders(OffenderSettings(), self.ctl.store, self.gate.runs)
        self.gate.offenders = self.offenders  # what the wiring does

    def tick(self, days: float) -> float:
        now = self.clock.now = at(days)
        self.ctl.step(now)
        assert self.ctl.wait(10)
        self.ctl.step(now)
        return now

    def drain(self, days: float, alert: int) -> None:
        self.ctl.request(MigrationRequest("n1", alert, f"fp{alert}", 3, 0.9,
                                          "n1: double-bit ECC", at(days)), at(days))
        self.tick(days)
        assert self.model.nodes["n1"].drained

    def release(self, days: float) -> None:
        """Ask; the gate tests (a pass) and releases it."""
        with pytest.raises(ActionConflict, match="started dcgm_r3"):
            self.ctl.release("n1", "alice", at(days))
        assert self.gate.wait(20)
        self.tick(days)
        assert not self.model.nodes["n1"].drained

    def events(self) -> list[tuple[str, str]]:
        return [(e.event, e.actor) for e in self.ctl.store.audit(node="n1", limit=1000)]

    def close(self) -> None:
        self.gate.close()
        self.ctl.close()


@pytest.fixture(params=["sqlite", "postgres"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    target = (request.getfixturevalue("postgres_server").fresh_schema()
              if request.param == "postgres" else ":memory:")
    r = Rig(target)
    yield r
    r.close()


def test_the_gate_holds_a_node_that_failed_again_soon_after_its_release(rig: Rig) -> None:
    rig.drain(0, alert=1)
    rig.release(0.1)
    assert rig.events()[-1] == ("released", "gpuhealth")
    assert not rig.offenders.of("n1", at(1)).flagged

    # Back at work, it fails again three days on: drained, and its release is held.
    rig.drain(3.1, alert=2)
    calls = len(rig.site.calls)
    for days in (3.2, 3.3):
        with pytest.raises(ActionConflict, match=(
                r"stays drained until its return-to-service gate passes: needs hardware "
                r"replacement: failed again 3.0 days after its release on 2023-11-15 00:37 UTC "
                r"\(drained again by act-\w+: n1: double-bit ECC\); not testing it again")):
            rig.ctl.release("n1", "alice", at(days))
    assert len(rig.site.calls) == calls and rig.model.nodes["n1"].drained  # nothing ran
    held = [e for e in rig.ctl.store.audit(node="n1", limit=1000)
            if e.event == "needs_replacement"]
    assert len(held) == 1 and held[0].actor == "gate"  # reported once
    assert [r.node for r in rig.offenders.fleet(at(3.3)) if r.flagged] == ["n1"]

    # The board is replaced: the flag clears (audited) and the gate tests it again.
    rec = rig.offenders.replaced("n1", "bob", "GPU baseboard swapped (RMA 123)", at(4))
    assert not rec.flagged and rec.replaced is not None and rec.replaced.actor == "bob"
    assert ("replaced", "bob") in rig.events()
    assert rig.offenders.fleet(at(4)) == []
    rig.release(4.1)
    assert rig.events()[-1] == ("released", "gpuhealth")


def test_a_failed_sweep_run_after_a_release_counts_with_its_gpus(rig: Rig) -> None:
    rig.drain(0, alert=1)
    rig.release(0.1)
    runs = rig.gate.runs
    run = runs.start("n1", "nccl", Purpose.SWEEP, "", "canned", at(10))
    runs.finish(run.id, build("nccl", [Check("busbw_gbps", Status.FAIL, gpu=6, figure=120.0,
                                             expected=400.0, unit="GB/s")]), at(10.01))
    rec = rig.offenders.of("n1", at(11))
    assert not rec.flagged and rec.returns_window == 1  # 9.9 days on: within 30, not 7
    [ret] = rec.returns
    assert ret.gpus == (6,) and "busbw_gbps on GPU 6: fail 120 GB/s (expected 400)" in \
        ret.evidence
    assert [(g.gpu, g.returns_window) for g in rec.gpus] == [(6, 1)]


def test_the_fleet_list_is_reused_until_it_is_stale_or_forgotten() -> None:
    ticks = [0.0]
    store, runs = ActionStore(), RunStore()
    off = Offenders(OffenderSettings(cache_s=60), store, runs, monotonic=lambda: ticks[0])
    assert off.fleet(at(1)) == []
    _released_then_failed(store, runs)
    assert off.fleet(at(1)) == []  # cached
    ticks[0] = 61.0
    assert [r.node for r in off.fleet(at(1))] == ["n7"]
    off.replaced("n7", "alice", "new board", at(1))
    assert off.fleet(at(1)) == []  # forgotten by the change, not left for a minute


def _released_then_failed(store: ActionStore, runs: RunStore) -> None:
    store.append_audit(AuditEntry(at=at(0), actor="gpuhealth", event="released",
                                  action_id="act-d", node="n7"))
    run = runs.start("n7", "dcgm_r3", Purpose.SWEEP, "", "canned", at(0.5))
    runs.finish(run.id, build("dcgm_r3", [Check("memory", Status.FAIL, gpu=1)]), at(0.6))
