"""What goes out: a message with the log entries to write once it is delivered (`Outgoing`),
and its outbox form. A message is written to the outbox (in the notification log's database)
before it is sent, with its id and everything a receiver renders its body from, so a resend
after a crash is the same message under the same id; receivers render a body from the message
alone (its time included), never from the clock of the send."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from service.notify.message import AlertRef, Message
from service.notify.notification_log import Entry, Staged, decode_entry, encode_entry


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message and the log entries to write once it is delivered."""

    message: Message
    log: tuple[tuple[str, str, Entry], ...]  # (receiver, group key, entry)
    budget_s: float  # retries stop after this long; the next flush tries again


def new_id() -> str:
    """A message id nothing else carries (Standard Webhooks' `msg_` form)."""
    return "msg_" + uuid.uuid4().hex


def encode_message(m: Message) -> str:
    d = asdict(m)
    d["alerts"] = [asdict(a) for a in m.alerts]
    return json.dumps(d, separators=(",", ":"), default=str)


def decode_message(text: str) -> Message:
    d: dict[str, Any] = json.loads(text)
    alerts = tuple(AlertRef(**{**a, "explanation": tuple(a["explanation"])})
                   for a in d.pop("alerts"))
    return Message(**{**d, "alerts": alerts, "digest_of": tuple(d["digest_of"])})


def staged(o: Outgoing) -> Staged:
    m = o.message
    log = json.dumps([[r, k, encode_entry(e)] for r, k, e in o.log], separators=(",", ":"))
    return Staged(m.id, m.receiver, m.group_key, m.at, o.budget_s, encode_message(m), log)


def outgoing(row: Staged) -> Outgoing:
    log = tuple((str(r), str(k), decode_entry(e)) for r, k, e in json.loads(row.log))
    return Outgoing(decode_message(row.message), log, row.budget_s)
