"""Builds the notification pipeline from the `notify` settings: the receivers (from the
registry in service.notify.receivers), the dispatcher over the alert store, and the sender."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from service.notify.config import NotifySettings
from service.notify.dispatcher import Dispatcher
from service.notify.labels import BoardOf, no_board
from service.notify.message import Notifier, ReadsBack, Refreshes, UpstreamStatus
from service.notify.notification_log import NotificationLog
from service.notify.record import RecordReceiver
from service.notify.sender import Sender, Sent
from service.notify.silences import SilenceStore
from service.notify.status import DeliveryIndex
from service.stages.alert_store import AlertStore


@dataclass(slots=True)
class Notification:
    dispatcher: Dispatcher
    sender: Sender
    notification_log: NotificationLog
    silences: SilenceStore

    def flush(self, now: float) -> int:
        """Send what is due; returns how many messages went to the sender."""
        outs = self.dispatcher.flush(now)
        self.sender.submit(outs)
        return len(outs)

    def tick(self, now: float, *, leading: bool, changed: bool, shared: bool
             ) -> tuple[int, list[Sent]]:
        """One tick: the leader regroups when alerts `changed` and sends what is due, returning
        the messages sent and the deliveries finished; another replica only marks the change
        (the leader reads it from the shared state; ours regroups later). `shared`: other
        shards' writers open and resolve alerts too, which no tick of ours sees change, so
        the leader regroups from the shared state every tick."""
        if not leading:
            if changed:
                self.dispatcher.mark()
            return 0, []
        if changed or shared:
            self.dispatcher.mark()
        return self.flush(now), self.sender.drain()

    def upstream(self, fingerprint: str) -> list[UpstreamStatus]:
        """What each Alertmanager we post to said of the alert when last read back."""
        out: list[UpstreamStatus] = []
        for r in list(self.sender.receivers.values()):
            if isinstance(r, ReadsBack):
                out += r.upstream(fingerprint)
        return out

    def deliveries(self) -> DeliveryIndex:
        """Per alert and receiver, what happened to it (build one per request)."""
        return DeliveryIndex(self.dispatcher)

    def close(self) -> None:
        self.sender.close()
        self.notification_log.close()
        self.silences.close()


def build_receivers(settings: NotifySettings, db: str | Path) -> dict[str, Notifier]:
    from service.notify.receivers import build_receiver

    out: dict[str, Notifier] = {"record": RecordReceiver(db)}
    for r in settings.receivers:
        out[r.name] = build_receiver(r.name, r.type, r.config)
    return out


def build_notification(settings: NotifySettings, alerts: AlertStore, db: str | Path, *,
                       cluster: str = "default",
                       receivers: Mapping[str, Notifier] | None = None,
                       background: bool = True, boards: BoardOf = no_board,
                       may_send: Callable[[], bool] = lambda: True) -> Notification:
    """`receivers` replaces the configured ones (tests, benchmarks); `background=False` sends
    inline, inside flush, which timeline tests rely on; `boards`: the GPU board an alert is
    about (service.stages.gpu_identity.GpuIdentities.at); `may_send`: whether this replica
    leads (service.notify.sender.Sender)."""
    rcv = dict(receivers) if receivers is not None else build_receivers(settings, db)
    notification_log = NotificationLog(db)
    silences = SilenceStore(db, max_s=settings.silence_max_s,
                            max_active=settings.silence_max_active)
    resolved = {r.name: r.send_resolved for r in settings.receivers}
    refresh = {name: r.refresh_interval_s for name, r in rcv.items() if isinstance(r, Refreshes)}
    dispatcher = Dispatcher(settings, alerts, notification_log, silences, cluster=cluster,
                            send_resolved=resolved, refresh=refresh, boards=boards)
    sender = Sender(rcv, dispatcher, retry_initial_s=settings.retry_initial_s,
                    retry_max_s=settings.retry_max_s, timeout_s=settings.send_timeout_s,
                    background=background, may_send=may_send)
    return Notification(dispatcher, sender, notification_log, silences)
