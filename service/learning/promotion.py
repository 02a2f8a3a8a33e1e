"""The model operations the CLI (`gpuhealth model`) and the API (`/v1/models`) share: put a
model in shadow, compare it with the active one, promote it (refused when it is worse on the
agreed metrics, unless forced) and roll back. Every change is audited in the registry and takes
effect in the running service at its next model check (service.learning.model_roles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.learning.model_registry import ModelEntry, ModelRegistry, RegistryError
from service.learning.scoreboard import Judgement, PromotionPolicy, judge, scores
from service.stages.label_store import LabelStore


class PromotionRefused(RegistryError):
    def __init__(self, judgement: Judgement) -> None:
        super().__init__("the challenger is not better on the agreed metrics: "
                         + "; ".join(judgement.reasons) + " (force to promote anyway)")
        self.judgement = judgement


def artifact_version(path: Path) -> str:
    """The version of a model artifact, loading it as the service would (ArtifactError, a
    ValueError, says why one is refused)."""
    from models.predictor.package import Predictor

    return Predictor.load(path).version


def shadow(registry: ModelRegistry, path: Path, actor: str, now: float) -> ModelEntry:
    return registry.shadow(artifact_version(path), str(path.resolve()), actor, now)


def compare(registry: ModelRegistry, labels: LabelStore, policy: PromotionPolicy,
            now: float, current: tuple[str, str]) -> dict[str, Any]:
    """The active model and the challenger side by side: each stream's scores over the shadow
    run, and the judgement a promotion would get."""
    ch = registry.challenger()
    run = registry.run()
    out: dict[str, Any] = {"active": {"version": current[0], "path": current[1]},
                           "challenger": None if ch is None else ch.as_dict(),
                           "run": None if run is None else run.as_dict(),
                           "policy": {"stream": policy.stream, "view": policy.view,
                                      "min_days": policy.min_days}}
    if run is not None:
        board = scores(registry, labels, run, now)
        out["scores"] = board
        out["judgement"] = judge(board, run, policy).as_dict()
    return out


def promote(registry: ModelRegistry, labels: LabelStore, policy: PromotionPolicy, *,
            actor: str, force: bool, reason: str, now: float,
            current: tuple[str, str]) -> ModelEntry:
    run = registry.run()
    if registry.challenger() is None or run is None:
        raise RegistryError("no challenger to promote: put one in shadow first")
    board = scores(registry, labels, run, now)
    verdict = judge(board, run, policy)
    if not verdict.better and not force:
        raise PromotionRefused(verdict)
    detail = {"judgement": verdict.as_dict(),
              "scores": {k: v[policy.view] for k, v in board.items()}}
    return registry.promote(actor, now, current=current, forced=force and not verdict.better,
                            reason=reason, detail=detail)


def rollback(registry: ModelRegistry, *, actor: str, reason: str, now: float,
             current: tuple[str, str]) -> ModelEntry:
    return registry.rollback(actor, now, current=current, reason=reason)
