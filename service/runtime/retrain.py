"""Scheduled retraining (`learning.retrain`; on by default wherever InfluxDB keeps the history it
trains from): every `every_days`, once some failure mode has `min_labels_per_mode` labels, a model
is trained from the fleet's own history (`gpuhealth train --from-influx`, in a child process so the
service's memory and threads are not the training's), put in shadow beside the active model,
and after `shadow_days` promoted only if it is better on the agreed metrics
(service.learning.promotion); either way the admin receiver is told.

The loop lives in the registry, not in this process: a restart finds the shadow run where it
was, and a model an operator put in shadow by hand is judged by the operator, never promoted
here (only runs this job started, audited as `scheduler`, are)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from apscheduler.schedulers.background import BackgroundScheduler

from service.learning import promotion
from service.learning.model_registry import RegistryError
from service.notify.dispatcher import Outgoing
from service.notify.message import AlertRef, Message
from service.pipeline import Pipeline
from service.settings import RetrainSettings, Settings

log = logging.getLogger(__name__)
ACTOR = "scheduler"
DAY = 86400.0


class Trainer(Protocol):
    """One verb: train a model from history into `out`, fine-tuned from `init` when given;
    TrainFailed says why not."""

    def train(self, out: Path, since_days: float, init: Path | None = None) -> None: ...


class TrainFailed(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class CommandTrainer:
    """`gpuhealth train --from-influx` in a child process, with the service's settings file
    (`gpuhealth serve --config` passes it on as GPUHEALTH_CONFIG; GPUHEALTH_ overrides in the
    environment are inherited)."""

    args: tuple[str, ...] = ()
    timeout_s: float = 6 * 3600.0

    def train(self, out: Path, since_days: float, init: Path | None = None) -> None:
        # `-c`, not `-m service.commands.cli`: run as __main__, that module would be a second
        # copy which the subcommand modules do not register with.
        cmd = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
               "sys.exit(main())", "train", "--from-influx",
               "--since", f"{since_days:g}d", "--out", str(out), "--no-progress", *self.args]
        cmd += [] if init is None else ["--init", str(init)]
        log.info("retraining: %s", " ".join(cmd))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise TrainFailed(f"training ran past {self.timeout_s:g} s") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise TrainFailed(f"training exited {done.returncode}: " + " / ".join(tail))


class Retrainer:
    def __init__(self, pipeline: Pipeline, settings: RetrainSettings, trainer: Trainer,
                 out_dir: Path, clock: Callable[[], float] = time.time) -> None:
        if pipeline.registry is None or pipeline.roles is None:
            raise ValueError("retraining needs the model registry (a live pipeline)")
        self.pipeline = pipeline
        self.registry = pipeline.registry
        self.roles = pipeline.roles
        self.settings = settings
        self.trainer = trainer
        self.out_dir = out_dir
        self.clock = clock
        self.last_outcome = ""
        self._lock = threading.Lock()  # one step at a time (the job, a test, a restart)

    def step(self) -> str:
        """Do what is due: judge a finished shadow run of ours, or train a new model."""
        with self._lock:
            if not self.pipeline.cluster.leader():
                # Replicas share one registry: the leader alone trains and judges.
                return self._done("not the leader: the leader retrains")
            now = self.clock()
            ch, run = self.registry.challenger(), self.registry.run()
            if ch is not None and run is not None and run.outcome == "running":
                if ch.added_by != ACTOR:
                    return self._done("an operator's challenger is in shadow: not retraining")
                if now - run.started_at < self.settings.shadow_days * DAY:
                    return self._done(f"{ch.version} in shadow since "
                                      f"{_iso(run.started_at)}")
                return self._judge(now)
            last = max((a.at for a in self.registry.audit(200)
                        if a.actor == ACTOR and a.action == "shadow"), default=None)
            if last is not None and now - last < self.settings.every_days * DAY:
                return self._done(f"last retrained {_iso(last)}")
            labels = label_counts(self.pipeline, self.settings, now)
            if not ready_modes(labels, self.settings):
                return self._done("waiting for labels: " + waiting_text(labels, self.settings))
            return self._train(now)

    def _train(self, now: float) -> str:
        out = self.out_dir / datetime.fromtimestamp(now, UTC).strftime("retrain-%Y%m%dT%H%M%SZ")
        init = self._init()
        try:
            self.trainer.train(out, self.settings.since_days, init)
            e = promotion.shadow(self.registry, out, ACTOR, now)
        except (TrainFailed, OSError, ValueError) as exc:
            self._tell(f"Retraining failed; the active model stays: {exc}", now, ok=False)
            return self._done(f"failed: {exc}")
        how = "" if init is None else f" (fine-tuned from {self._active()[0]})"
        self._tell(f"Retrained {e.version}{how} on {self.settings.since_days:g} days of history; "
                   f"in shadow for {self.settings.shadow_days:g} days before it is judged", now)
        return self._done(f"trained {e.version}, in shadow")

    def _active(self) -> tuple[str, str]:
        """(version, path) of the active model: the registry's (a promotion counts at once,
        before the service's next model check loads it), else the one the service runs."""
        e = self.registry.active()
        return (e.version, e.path) if e is not None else self.roles.active()

    def _init(self) -> Path | None:
        """The active model's artifact to fine-tune from (`learning.retrain.fine_tune`), or
        None: from scratch, also when no model is active."""
        path = self._active()[1]
        return Path(path) if self.settings.fine_tune and path else None

    def _judge(self, now: float) -> str:
        current = self.roles.active()
        policy = self.pipeline.settings.detectors.model.promotion
        try:
            e = promotion.promote(self.registry, self.pipeline.labels, policy, actor=ACTOR,
                                  force=False, reason="scheduled retraining", now=now,
                                  current=current)
        except promotion.PromotionRefused as exc:
            ch = self.registry.stop(ACTOR, now, "; ".join(exc.judgement.reasons))
            self._tell(f"Retrained {ch.version} not promoted, {current[0] or 'no model'} stays "
                       f"active: {'; '.join(exc.judgement.reasons)}", now)
            return self._done(f"kept {current[0]}")
        except RegistryError as exc:
            return self._done(f"not judged: {exc}")
        self._tell(f"Retrained {e.version} promoted, replacing {current[0] or 'no model'} "
                   "(gpuhealth model rollback returns to it)", now)
        return self._done(f"promoted {e.version}")

    def _done(self, outcome: str) -> str:
        self.last_outcome = outcome
        log.info("retraining: %s", outcome)
        return outcome

    def _tell(self, text: str, now: float, ok: bool = True) -> None:
        """A message to the admin receiver (if one is named and notification is on)."""
        name, n = self.settings.notify_receiver, self.pipeline.notification
        if name is None or n is None:
            return
        if name not in n.sender.receivers:
            log.error("learning.retrain.notify_receiver %r is not a receiver", name)
            return
        ref = AlertRef(f"retrain-{int(now)}", 0, {
            "alertname": "ModelRetraining", "entity": "model", "severity": "info" if ok else
            "warning", "level": "1"}, {"summary": text}, "firing", 1, 0.0, now)
        msg = Message(name, f"retrain:{int(now)}", {"alertname": "ModelRetraining"}, (ref,), now,
                      "new", self.pipeline.settings.notify.external_url)
        n.sender.submit([Outgoing(msg, (), self.pipeline.settings.notify.send_timeout_s)])


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def enabled(settings: Settings) -> tuple[bool, str]:
    """Whether the job runs, and why: "auto" runs it where InfluxDB keeps the history that
    `train --from-influx` reads."""
    cfg = settings.learning.retrain
    if cfg.enabled == "auto":
        if settings.storage.influxdb.url:
            return True, "on (auto: InfluxDB keeps the history it trains from)"
        return False, ("off (auto: no InfluxDB, whose history it trains from; "
                       "storage.influxdb.url)")
    return (True, "on") if cfg.enabled else (False, "off (learning.retrain.enabled: false)")


def label_counts(pipeline: Pipeline, cfg: RetrainSettings, now: float) -> dict[str, int]:
    """Failure labels per mode over the span a retraining would train on."""
    return pipeline.labels.counts(since=now - cfg.since_days * DAY)


def ready_modes(labels: dict[str, int], cfg: RetrainSettings) -> list[str]:
    return sorted(m for m, n in labels.items()
                  if m != "unknown" and n >= cfg.min_labels_per_mode)


def waiting_text(labels: dict[str, int], cfg: RetrainSettings) -> str:
    have = ", ".join(f"{m} {n}" for m, n in sorted(labels.items())) or "none"
    return (f"no failure mode has {cfg.min_labels_per_mode} labels in the last "
            f"{cfg.since_days:g} days (have: {have})")


def learning_status(pipeline: Pipeline, now: float) -> dict[str, Any]:
    """What the fleet has taught the model, for `/v1/models` and the console: whether the loop
    runs, the labels per mode it would train on and which modes have enough, and what the job
    last did (its audit entries)."""
    cfg = pipeline.settings.learning.retrain
    on, why = enabled(pipeline.settings)
    labels = label_counts(pipeline, cfg, now)
    ready = ready_modes(labels, cfg)
    audit = [] if pipeline.registry is None else [
        {"at": a.at, "action": a.action, "version": a.version, "reason": a.reason}
        for a in pipeline.registry.audit(200) if a.actor == ACTOR][:10]
    return {"enabled": on, "why": why, "since_days": cfg.since_days,
            "min_labels_per_mode": cfg.min_labels_per_mode, "labels_per_mode": labels,
            "ready_modes": ready,
            "waiting": None if ready else waiting_text(labels, cfg),
            "every_days": cfg.every_days, "shadow_days": cfg.shadow_days, "history": audit,
            # The failure windows: shipped, or refitted on the fleet's own alerts
            # (service/stages/window_refit.py); None where the refit is off.
            "windows": None if pipeline.windows is None else pipeline.windows.status.as_dict()}


def start_retraining(pipeline: Pipeline) -> BackgroundScheduler | None:
    """The retraining job on its own scheduler (hours apart, unrelated to the tick's), where
    `enabled` says it runs; None otherwise."""
    cfg = pipeline.settings.learning.retrain
    on, why = enabled(pipeline.settings)
    if not on:
        log.info("scheduled retraining %s", why)
        return None
    n = pipeline.notification
    if cfg.notify_receiver is not None and (n is None or cfg.notify_receiver
                                            not in n.sender.receivers):
        raise ValueError(f"learning.retrain.notify_receiver {cfg.notify_receiver!r} is not a "
                         "configured receiver (notify.receivers, or record)")
    out = cfg.out_dir or pipeline.settings.storage.data_dir / "models"
    job = Retrainer(pipeline, cfg, CommandTrainer(tuple(cfg.train_args), cfg.timeout_s), out)
    sched = BackgroundScheduler(timezone=UTC)
    sched.add_job(job.step, "interval", seconds=cfg.check_s, id="retrain", max_instances=1,
                  coalesce=True, next_run_time=datetime.now(UTC))
    sched.start()
    log.info("scheduled retraining: every %g days on %g days of history, %g days in shadow",
             cfg.every_days, cfg.since_days, cfg.shadow_days)
    return sched
