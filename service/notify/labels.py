"""An alert's labels and its fingerprint, one definition for the API, the routing tree and the
receivers (Alertmanager's model: labels identify an alert, annotations describe it).

The fingerprint hashes the *identity* labels only, `alertname` and `entity` (an entity key
carries its node and scope: `n1:gpu3`, `n1:gpu3:nvlink2`, `n1:mlx5_0:1`), sorted and joined
as `name=value` pairs, 16 hex characters of SHA-256 as Alertmanager shows its own. So the same
alert on the same entity keeps its fingerprint across restarts, upgrades and level changes,
while level, severity and the top signal (which change during an episode) stay out of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from collectors.identity import GpuIdentity
from service.notify.message import LEVEL_SEVERITY

# A GPU alert's board, with dcgm-exporter's label names where it has them (UUID, modelName,
# pci_bus_id): the board that sat in the slot when the alert started (an RMA names the board
# that failed, not its replacement).
BOARD_LABELS = {"uuid": "UUID", "serial": "serial", "model": "modelName",
                "pci_bus_id": "pci_bus_id"}
# Labels that change while one episode lasts without making it another alert: receivers that
# key alerts by their whole label set (Alertmanager) get these as annotations instead. A
# board's labels are among them: its identity may be said a minute after the alert opened.
VOLATILE = frozenset({"signal", "flapping", "stale", *BOARD_LABELS.values()})


class Labelled(Protocol):
    """What labels are made of: an alert record (service/stages/alert_store.Alert, which
    imports this module for its fingerprint, so it is named by shape here)."""

    @property
    def name(self) -> str: ...
    @property
    def entity(self) -> str: ...
    @property
    def scope(self) -> object: ...
    @property
    def node(self) -> str: ...
    @property
    def level(self) -> int: ...
    @property
    def explanation(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def flapping(self) -> bool: ...
    @property
    def stale(self) -> bool: ...


def entity_parts(node: str, entity: str, scope: str) -> dict[str, str]:
    """The entity key's parts as labels a Prometheus user filters on: `gpu` (its index) for
    GPU and NVLink alerts, `link` for NVLink ones, `device` and `port` for InfiniBand ports,
    `psu` and `fan` (the BMC's id) for power supplies and fans. A key that does not start with
    its node says nothing more (never a guess)."""
    if not entity.startswith(node + ":"):
        return {}
    parts = entity[len(node) + 1:].split(":")
    if scope in ("gpu", "nvlink") and parts[0].startswith("gpu"):
        out = {"gpu": parts[0].removeprefix("gpu")}
        if scope == "nvlink" and len(parts) == 2 and parts[1].startswith("nvlink"):
            out["link"] = parts[1].removeprefix("nvlink")
        return out
    if scope == "ib_port" and len(parts) == 2:
        return {"device": parts[0], "port": parts[1]}
    if scope in ("psu", "fan") and len(parts) == 1 and parts[0].startswith(scope):
        return {scope: parts[0].removeprefix(scope)}
    return {}


BoardOf = Callable[[str, float], "GpuIdentity | None"]  # (entity, when) -> its GPU's board


def no_board(entity: str, at: float) -> GpuIdentity | None:
    return None


def board_labels(board: GpuIdentity | None) -> dict[str, str]:
    """A GPU board's labels (BOARD_LABELS), those its sources said."""
    if board is None:
        return {}
    return {label: v for attr, label in BOARD_LABELS.items() if (v := getattr(board, attr))}


def alert_labels(a: Labelled, cluster: str, level: int | None = None,
                 board: GpuIdentity | None = None) -> dict[str, str]:
    """What identifies and classifies an alert, at its level (or `level`, for a route that
    saw it at another one): alertname, cluster, node, entity (and its parts), scope, level,
    severity, plus the volatile `signal` (top rule), `flapping`, `stale` and, for a GPU's or
    NVLink link's alert, its board (`board`: UUID, serial, modelName, pci_bus_id)."""
    lv = a.level if level is None else level
    scope = str(a.scope)
    out = {"alertname": a.name, "cluster": cluster, "node": a.node, "entity": a.entity,
           "scope": scope, **entity_parts(a.node, a.entity, scope), "level": str(lv),
           "severity": LEVEL_SEVERITY.get(lv, "info")}
    if a.explanation:
        out["signal"] = str(a.explanation[0].get("rule", ""))
    if a.flapping:
        out["flapping"] = "true"
    if a.stale:
        out["stale"] = "true"
    out.update(board_labels(board))
    return out
