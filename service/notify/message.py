"""What the notification pipeline hands a receiver: one message per aggregation group, shaped
like Alertmanager's (labels identify an alert, annotations describe it), plus our level, risk
and explanation. Receivers say whether a failed delivery is worth retrying instead of raising:
a failure at the edge is data (docs/design.md, "The seams")."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Status = Literal["firing", "resolved"]
LEVEL_SEVERITY = {1: "info", 2: "warning", 3: "critical"}


@dataclass(frozen=True, slots=True)
class AlertRef:
    """One alert instance as a notification shows it."""

    fingerprint: str  # stable identity: hash of the identifying labels
    alert_id: int  # the episode's id in the alert store (a new one after each resolve)
    labels: dict[str, str]  # alertname, level, severity, scope, node, entity, cluster
    annotations: dict[str, str]  # summary, description
    status: Status
    level: int  # the level it fires at (the peak level once resolved)
    risk: float
    starts_at: float  # unix seconds
    ends_at: float | None = None  # set once resolved
    explanation: tuple[dict[str, Any], ...] = ()  # signals, strongest first (Signal.as_dict)
    url: str = ""  # where an operator reads more (the API's alert page)
    # Digest of the hard evidence in the explanation: a change is news to a receiver.
    revision: str = ""
    console_url: str = ""  # the console's page of the alert (generatorURL)

    @property
    def summary(self) -> str:
        return self.annotations.get("summary", self.labels.get("alertname", "alert"))


@dataclass(frozen=True, slots=True)
class Message:
    """One notification of one aggregation group to one receiver."""

    receiver: str
    group_key: str  # stable for the group's life: route id plus the group_by label values
    group_labels: dict[str, str]
    alerts: tuple[AlertRef, ...]
    at: float  # unix seconds, when the pipeline flushed the group
    reason: str = "new"  # new | update | repeat | resolved | digest
    external_url: str = ""
    # A digest rolls several groups that a rate limit held back into one message.
    digest_of: tuple[str, ...] = field(default=())
    # One delivery of one state: kept across retries and a resend after a crash (the outbox),
    # never reused for another message. Empty only for messages built outside the pipeline.
    id: str = ""

    @property
    def firing(self) -> tuple[AlertRef, ...]:
        return tuple(a for a in self.alerts if a.status == "firing")

    @property
    def resolved(self) -> tuple[AlertRef, ...]:
        return tuple(a for a in self.alerts if a.status == "resolved")

    @property
    def status(self) -> Status:
        return "firing" if self.firing else "resolved"

    @property
    def level(self) -> int:
        """The highest level among firing alerts, else among resolved ones."""
        pool = self.firing or self.alerts
        return max((a.level for a in pool), default=0)

    @property
    def severity(self) -> str:
        return LEVEL_SEVERITY.get(self.level, "info")

    @property
    def dedup_key(self) -> str:
        """Stable per group, short enough for PagerDuty (255 chars) and a mail thread id."""
        return "gpuhealth-" + hashlib.sha256(self.group_key.encode()).hexdigest()[:32]

    @property
    def title(self) -> str:
        names = ", ".join(sorted({a.labels.get("entity", "?") for a in self.firing}))
        node = self.group_labels.get("node", "")
        where = f" on {node}" if node else ""
        if self.status == "resolved":
            return f"[RESOLVED] level {self.level}{where}: {len(self.alerts)} alert(s)"
        return (f"[FIRING:{len(self.firing)}] level {self.level} {self.severity}{where}: "
                f"{names}")


@dataclass(frozen=True, slots=True)
class Delivery:
    ok: bool
    retry: bool = False  # worth trying again (429, 5xx, a network error, an SMTP 4xx)
    detail: str = ""
    retry_after_s: float | None = None  # what the receiver asked for (Retry-After)
    key: str = ""  # what the far end calls it (PagerDuty's dedup_key, an SMTP Message-ID)


class Notifier(Protocol):
    """A receiver integration. Never raises for a failed delivery; says whether to retry."""

    name: str

    async def notify(self, msg: Message) -> Delivery: ...


@runtime_checkable
class Refreshes(Protocol):
    """A receiver whose far end forgets an alert unless told again: Alertmanager drops one
    whose endsAt passed. The dispatcher hands it every firing alert routed to it, in one
    message (reason "refresh"), every `refresh_interval_s`. Such a receiver gets the truth:
    our inhibitions and silences never hold an alert back from it (its far end applies its
    own), only our own people-facing receivers."""

    name: str
    refresh_interval_s: float


@dataclass(frozen=True, slots=True)
class UpstreamStatus:
    """What an external Alertmanager said of one of our alerts when last read back."""

    receiver: str
    url: str  # the Alertmanager
    state: str  # its word: active, suppressed or unprocessed
    silenced_by: tuple[str, ...]  # its silence ids
    inhibited_by: tuple[str, ...]
    checked_at: float  # unix seconds


@runtime_checkable
class ReadsBack(Protocol):
    """A receiver that reads back what the far end made of our alerts (silences there)."""

    def upstream(self, fingerprint: str) -> list[UpstreamStatus]: ...
