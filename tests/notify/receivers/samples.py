"""Messages as the pipeline would hand them to a receiver."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from service.notify.message import AlertRef, Delivery, Message

T = TypeVar("T")
T0 = 1_700_000_000.0

SIGNALS: tuple[dict[str, Any], ...] = (
    {"rule": "ecc", "signal": "ecc_sbe_rate", "value": 42.0, "threshold": 10.0,
     "risk": 0.91, "hard": True},
    {"rule": "thermal", "signal": "gpu_temp_c", "value": 91.5, "threshold": 85.0,
     "risk": 0.62, "hard": False},
)


def alert(entity: str = "gpu3", *, node: str = "node-7", level: int = 3, risk: float = 0.93,
          status: str = "firing", summary: str = "ECC errors rising",
          ends_at: float | None = None, **labels: str) -> AlertRef:
    all_labels = {"alertname": "GpuFailureRisk", "level": str(level), "node": node,
                  "entity": entity, "cluster": "c1", "scope": "gpu", **labels}
    return AlertRef(
        fingerprint=f"fp-{node}-{entity}", alert_id=1, labels=all_labels,
        annotations={"summary": summary, "description": f"{entity} on {node} may fail"},
        status="firing" if status == "firing" else "resolved", level=level, risk=risk,
        starts_at=T0, ends_at=ends_at, explanation=SIGNALS,
        url=f"http://gpuhealth.test/alerts/{entity}")


def message(*alerts: AlertRef, group: str = "route-1/node-7", node: str = "node-7",
            at: float = T0 + 60, reason: str = "new") -> Message:
    return Message(receiver="oncall", group_key=group, group_labels={"node": node},
                   alerts=alerts or (alert(),), at=at, reason=reason,
                   external_url="http://gpuhealth.test")


def resolved(msg: Message) -> Message:
    """The same group after every alert ended."""
    return replace(msg, alerts=tuple(replace(a, status="resolved", ends_at=msg.at + 300)
                                     for a in msg.alerts), at=msg.at + 300, reason="resolved")


def run(aw: Awaitable[T]) -> T:
    async def main() -> T:
        return await aw
    return asyncio.run(main())


class Closable(Protocol):
    async def notify(self, msg: Message) -> Delivery: ...

    async def aclose(self) -> None: ...


def deliver(make: Callable[[], Closable], *msgs: Message) -> list[Delivery]:
    """Every message through one receiver built by `make`, in order; the receiver is closed."""
    async def go() -> list[Delivery]:
        r = make()
        try:
            return [await r.notify(m) for m in msgs]
        finally:
            await r.aclose()
    return asyncio.run(go())
