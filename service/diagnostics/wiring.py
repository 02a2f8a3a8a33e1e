"""Builds the gate from the `diagnostics` settings and hangs it on the remediation controller:
every release then waits for it, and a pass releases through the controller."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

from collectors.frames import Batch
from service.diagnostics.gate import Diagnostics
from service.diagnostics.kubernetes_site import KubernetesSite
from service.diagnostics.local_site import LocalSite
from service.diagnostics.offenders import Offenders
from service.diagnostics.runs import RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.site import Site
from service.diagnostics.slurm_site import SlurmSite
from service.diagnostics.sweep import Sweeper
from service.remediation.controller import RemediationController
from service.storage.state_db import StateTarget


def build_sweeper(settings: DiagnosticsServiceSettings, diag: Diagnostics | None,
                  controller: RemediationController, nodes: Callable[[], Iterable[str]]
                  ) -> Sweeper | None:
    """None unless the gate and sweeps are on. Sweeps skip nodes gpuhealth holds drained and
    nodes another shard owns."""
    if diag is None or not settings.sweep.enabled:
        return None
    return Sweeper(settings.sweep, settings.suites[settings.sweep.suite], diag,
                   nodes=lambda: [n for n in nodes() if controller.owns(n)],
                   held=lambda node: bool(controller.store.drains(node)))


def build_site(settings: DiagnosticsServiceSettings) -> Site:
    if settings.site == "local":
        return LocalSite(settings.local, socket.gethostname().split(".")[0])
    if settings.site == "kubernetes":
        return KubernetesSite(settings.kubernetes.model_copy(
            update={"gpus": settings.gpus_per_node}))
    return SlurmSite(settings.slurm)


def build_diagnostics(settings: DiagnosticsServiceSettings, db: StateTarget,
                      controller: RemediationController, publish: Callable[[Batch], object]
                      ) -> Diagnostics | None:
    """None while the gate is off."""
    if not settings.enabled:
        return None
    diag = Diagnostics(settings, RunStore(db), build_site(settings),
                       audit=controller.store.append_audit, publish=publish)
    diag.offenders = Offenders(settings.offenders, controller.store, diag.runs)
    controller.gate = diag
    diag.release = lambda node, actor, now: controller.release(node, actor, now)
    return diag
