"""The soak's mail server: a real SMTP server on loopback (aiosmtpd, the receiver tests' sink,
tests/notify/receivers/servers.py) that the service's `email` receiver sends level-2 alerts to.
Every mail is kept with its arrival time, and read back as the alerts it lists: the text part
of the product's mail (service/notify/receivers/render.py) gives, per alert, its section
(Firing or Resolved), `entity:` and `level:`."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage

from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.notify.receivers.servers import SmtpSink, smtp_server

_SECTION = re.compile(r"^(Firing|Resolved) \(\d+\)$")
_ENTITY = re.compile(r"^\s+entity: (\S+)$")
_LEVEL = re.compile(r"^\s+level: (\d)")


@dataclass(frozen=True, slots=True)
class MailAlert:
    at: float  # when the mail arrived
    status: str  # firing or resolved
    entity: str
    level: int


class _Sink(SmtpSink):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, bytes]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.lock:
            self.arrivals.append((time.time(), bytes(envelope.original_content or b"")))
        return "250 2.0.0 OK"


class MailSink:
    def __init__(self) -> None:
        self.sink = _Sink()
        self._ctx = smtp_server(self.sink)
        self.port = self._ctx.__enter__()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._ctx.__exit__(None, None, None)

    @property
    def mails(self) -> int:
        with self.sink.lock:
            return len(self.sink.arrivals)

    def alerts(self) -> list[MailAlert]:
        with self.sink.lock:
            arrivals = list(self.sink.arrivals)
        out: list[MailAlert] = []
        for at, raw in arrivals:
            mail = message_from_bytes(raw, policy=policy.default)
            assert isinstance(mail, EmailMessage)
            part = mail.get_body(preferencelist=("plain",))
            out += _listed(at, part.get_content() if part is not None else "")
        return out


def _listed(at: float, text: str) -> list[MailAlert]:
    out: list[MailAlert] = []
    section, entity = "", ""
    for line in text.splitlines():
        if m := _SECTION.match(line):
            section = m.group(1).lower()
        elif m := _ENTITY.match(line):
            entity = m.group(1)
        elif (m := _LEVEL.match(line)) and section and entity:
            out.append(MailAlert(at, section, entity, int(m.group(1))))
            entity = ""
    return out
