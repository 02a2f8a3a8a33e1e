"""The model registry and the shadow challenger through a real pipeline: a challenger scores
beside the active model without alerting, both are scored against the labels that arrive,
promotion is refused when the challenger is worse (unless forced), and every promotion is
audited and reversible by rollback, which the running pipeline follows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.labels import FailureMode
from service.assembly import Wiring
from service.learning import promotion
from service.learning.model_registry import ModelRegistry, RegistryError
from service.learning.scoreboard import PromotionPolicy
from service.pipeline import Pipeline, build_pipeline
from service.settings import SHIPPED_MODEL, Settings
from service.stages.label_store import LabelStore, NewLabel
from tests.pipeline.builders import T0, Rounds

STEP = 5.0
DAY = 86400.0
ANY = PromotionPolicy(min_days=0.0)


def _copy_model(tmp: Path, name: str) -> Path:
    out = tmp / name
    shutil.copytree(SHIPPED_MODEL, out)
    return out


def _pipe(tmp: Path) -> Pipeline:
    s = Settings.model_validate({"storage": {"data_dir": tmp}})
    return build_pipeline(s, Wiring.offline(alert_db=str(tmp / "a.db"), autolabel=True,
                                            model_roles=True))


def test_a_challenger_scores_in_shadow_without_alerting(tmp_path: Path) -> None:
    challenger = _copy_model(tmp_path, "challenger")
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=2, gpus=4)
    try:
        assert pipe.registry is not None and pipe.roles is not None
        promotion.shadow(pipe.registry, challenger, "test", T0)
        pipe.roles.check(force=True)
        assert pipe.roles.shadow is not None
        for k in range(6):
            pipe.process(r.batch(T0 + k * STEP), T0 + k * STEP)
        r.add("n0:gpu1", "ecc_dbe_volatile", 1)
        for k in range(6, 12):
            pipe.process(r.batch(T0 + k * STEP), T0 + k * STEP)
        run = pipe.registry.run()
        assert run is not None and run.node_seconds == pytest.approx(2 * 11 * STEP)
        # The service's own alert is on record once; the challenger's fused stream saw the same
        # hard fault; nothing was alerted twice because of the shadow.
        assert [a.entity for a in pipe.alerts.find()] == ["n0:gpu1"]
        fused = pipe.registry.alarms(run.id, "challenger:fused")
        assert [(e, lv) for _, e, _, _, lv, _, _ in fused] == [("n0:gpu1", 3)]
        assert pipe.registry.alarms(run.id, "active:fused") == [
            (T0 + 6 * STEP, "n0:gpu1", "gpu", "n0", 3, 0, "dbe")]
        board = promotion.compare(pipe.registry, pipe.labels, ANY, T0 + 12 * STEP,
                                  pipe.roles.active())["scores"]
        # The DBE is labelled at the tick it fired: a detection, not a prediction, for both.
        for stream in ("active:fused", "challenger:fused"):
            assert board[stream]["watch"]["failures"] == 1
            assert board[stream]["watch"]["detected"] == 0
    finally:
        pipe.close()


def _labelled_run(tmp: Path) -> tuple[ModelRegistry, LabelStore, int]:
    """A shadow run of 10 days over 100 nodes: 4 failures the active model warned of 12 h
    ahead; the challenger warned of 3 and raised 5 false alarms."""
    reg, labels = ModelRegistry(tmp / "r.db"), LabelStore(tmp / "r.db")
    reg.shadow("lstm-challenger", str(tmp / "challenger"), "test", T0)
    run = reg.run()
    assert run is not None
    fail_at = [T0 + d * DAY for d in (2, 4, 6, 8)]
    rows: list[tuple[str, float, str, str, str, int, int, str]] = []
    for i, t in enumerate(fail_at):
        gpu = f"n{i}:gpu0"
        labels.add([NewLabel("failure", t, f"n{i}", gpu, Scope.GPU, "rule:dbe",
                             mode=FailureMode.M1_HBM)], t)
        rows.append(("active:fused", t - 12 * 3600, gpu, "gpu", f"n{i}", 2, 0, "lstm"))
        if i < 3:
            rows.append(("challenger:fused", t - 12 * 3600, gpu, "gpu", f"n{i}", 2, 0, "lstm"))
    rows += [("challenger:fused", T0 + DAY * (1 + j), f"n{50 + j}:gpu1", "gpu", f"n{50 + j}",
              2, 0, "lstm") for j in range(5)]
    reg.add_alarms(run.id, rows, 100 * 10 * DAY, T0 + 10 * DAY)
    return reg, labels, run.id


def test_promotion_is_refused_when_the_challenger_is_worse_unless_forced(tmp_path: Path) -> None:
    reg, labels, _ = _labelled_run(tmp_path)
    now, current = T0 + 10 * DAY, ("lstm-default", str(SHIPPED_MODEL))
    try:
        board = promotion.compare(reg, labels, ANY, now, current)
        a, c = board["scores"]["active:fused"]["warning"], board["scores"]["challenger:fused"][
            "warning"]
        assert (a["detected"], a["false_alarms"], a["f1_all"]) == (4, 0, 1.0)
        assert (c["detected"], c["false_alarms"]) == (3, 5)
        assert c["fa_per_1000_node_days"] == pytest.approx(5.0)
        assert c["by_mode"]["M1_hbm"]["detected"] == 3
        with pytest.raises(promotion.PromotionRefused) as refused:
            promotion.promote(reg, labels, ANY, actor="ops", force=False, reason="", now=now,
                              current=current)
        assert "more false alarms" in str(refused.value) and "lower F1" in str(refused.value)
        assert reg.active() is None and reg.challenger() is not None  # nothing changed
        e = promotion.promote(reg, labels, ANY, actor="ops", force=True, reason="trust me",
                              now=now, current=current)
        assert (e.role, e.version) == ("active", "lstm-challenger")
        (audit, *_) = reg.audit()
        assert (audit.action, audit.actor, audit.forced, audit.reason) == (
            "promote", "ops", True, "trust me")
        assert audit.detail["judgement"]["better"] is False
        # Reversible: back to the settings' model, then forward again.
        back = promotion.rollback(reg, actor="ops", reason="worse in prod", now=now + 60,
                                  current=(e.version, e.path))
        assert (back.version, back.path) == current
        again = promotion.rollback(reg, actor="ops", reason="", now=now + 120,
                                   current=(back.version, back.path))
        assert again.version == "lstm-challenger"
        assert [x.action for x in reg.audit()] == ["rollback", "rollback", "promote", "shadow"]
    finally:
        reg.close()
        labels.close()


def test_a_short_shadow_or_one_without_failures_is_not_judged_better(tmp_path: Path) -> None:
    reg, labels, _ = _labelled_run(tmp_path)
    try:
        week = PromotionPolicy(min_days=14.0)
        out = promotion.compare(reg, labels, week, T0 + 10 * DAY, ("a", "b"))
        assert not out["judgement"]["better"]
        assert any("less than the 14 agreed" in x for x in out["judgement"]["reasons"])
    finally:
        reg.close()
        labels.close()


def test_nothing_to_promote_or_roll_back_is_a_clear_refusal(tmp_path: Path) -> None:
    reg, labels = ModelRegistry(tmp_path / "r.db"), LabelStore(tmp_path / "r.db")
    try:
        with pytest.raises(RegistryError, match="no challenger"):
            promotion.promote(reg, labels, ANY, actor="ops", force=True, reason="", now=T0,
                              current=("a", "b"))
        with pytest.raises(RegistryError, match="nothing to roll back to"):
            promotion.rollback(reg, actor="ops", reason="", now=T0, current=("a", "b"))
        # A stopped challenger is no rollback target.
        reg.shadow("lstm-x", "/nowhere", "ops", T0)
        reg.stop("ops", T0 + 1)
        with pytest.raises(RegistryError, match="nothing to roll back to"):
            promotion.rollback(reg, actor="ops", reason="", now=T0 + 2, current=("a", "b"))
    finally:
        reg.close()
        labels.close()


def test_the_running_pipeline_follows_a_promotion_and_a_rollback(tmp_path: Path) -> None:
    challenger = _copy_model(tmp_path, "challenger")
    pipe = _pipe(tmp_path)
    try:
        assert pipe.registry is not None and pipe.roles is not None and pipe.model is not None
        assert pipe.model.path == SHIPPED_MODEL
        promotion.shadow(pipe.registry, challenger, "test", T0)
        promotion.promote(pipe.registry, pipe.labels, ANY, actor="ops", force=True, reason="",
                          now=T0, current=pipe.roles.active())
        pipe.roles.check(force=True)
        assert pipe.model.path == challenger.resolve() and pipe.model.status.loaded
        assert pipe.roles.shadow is None  # the challenger is active now: no shadow run
        promotion.rollback(pipe.registry, actor="ops", reason="", now=T0 + 1,
                           current=pipe.roles.active())
        pipe.roles.check(force=True)
        assert pipe.model.path == SHIPPED_MODEL and pipe.model.status.loaded
    finally:
        pipe.close()


def test_a_challenger_that_cannot_load_is_refused_and_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.json").write_text("{not json")
    pipe = _pipe(tmp_path)
    try:
        assert pipe.registry is not None and pipe.roles is not None
        with pytest.raises(ValueError):
            promotion.shadow(pipe.registry, bad, "test", T0)
        pipe.registry.shadow("lstm-bad", str(bad), "test", T0)  # written behind our back
        pipe.roles.check(force=True)
        assert pipe.roles.shadow is None and "refused" in pipe.roles.challenger_error
        r = Rounds(nodes=1, gpus=2)
        pipe.process(r.batch(T0), T0)  # scoring goes on
    finally:
        pipe.close()


def test_the_registry_store_on_both_backends(state_target: str) -> None:
    """Shadow, alarms, promote, rollback and the audit, store-level, on the SQLite file and
    on PostgreSQL; a second instance (another replica) sees every change."""
    reg, other = ModelRegistry(state_target), ModelRegistry(state_target)
    try:
        assert reg.active() is None and reg.previous() is None and reg.run() is None
        ch = reg.shadow("lstm-b", "/models/b", "ops", T0)
        run = other.run()
        assert run is not None and run.outcome == "running" and str(run.challenger) == str(ch.id)
        reg.restart_run(run.id, T0 + 5)
        reg.add_alarms(run.id, [("challenger:fused", T0 + 20, "n1:gpu0", "gpu", "n1", 2, 0,
                                 "lstm"),
                                ("active:fused", T0 + 10, "n1:gpu0", "gpu", "n1", 3, 0, "dbe")],
                       600.0, T0 + 30)
        assert other.alarms(run.id, "active:fused") == [
            (T0 + 10, "n1:gpu0", "gpu", "n1", 3, 0, "dbe")]
        got = other.run_by_id(run.id)
        assert got is not None and (got.started_at, got.node_seconds) == (T0 + 5, 600.0)
        active = reg.promote("ops", T0 + 40, current=("lstm-a", "/models/a"), forced=True,
                             reason="better", detail={"score": 0.5})
        assert active.version == "lstm-b" and other.challenger() is None
        prev = other.previous()  # the settings' model, recorded so a rollback finds it
        assert prev is not None and (prev.version, prev.role) == ("lstm-a", "retired")
        back = other.rollback("ops", T0 + 50, current=("lstm-b", "/models/b"), reason="oops")
        assert back.version == "lstm-a" and reg.active() == back
        again = reg.previous()
        assert again is not None and again.version == "lstm-b"
        audit = reg.audit()
        assert [(a.action, a.version, a.previous, a.forced) for a in audit] == [
            ("rollback", "lstm-a", "lstm-b", False), ("promote", "lstm-b", "lstm-a", True),
            ("shadow", "lstm-b", "", False)]
        assert audit[1].detail["score"] == 0.5
        finished = reg.run_by_id(run.id)
        assert finished is not None and finished.outcome == "promoted"
        with pytest.raises(RegistryError, match="no challenger"):
            other.stop("ops", T0 + 60)
    finally:
        reg.close()
        other.close()
