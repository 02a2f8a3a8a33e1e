"""Silences: matchers that mute notifications for a while, with an author, a comment and an
expiry (at most `max_s` ahead, so nothing is muted forever by mistake). Persisted in the shared
state (SQLite, or PostgreSQL shared by replicas); expiring one early keeps it for the record."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.notify.matchers import Matcher, match_all, parse_all
from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    matchers TEXT NOT NULL,
    author TEXT NOT NULL,
    comment TEXT NOT NULL,
    created_at REAL NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL NOT NULL,
    expired_by TEXT
);
"""


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    author: str
    comment: str
    created_at: float
    starts_at: float
    ends_at: float
    expired_by: str | None = None

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def state(self, now: float) -> str:
        if now >= self.ends_at:
            return "expired"
        return "active" if now >= self.starts_at else "pending"

    def mutes(self, labels: Mapping[str, str], now: float) -> bool:
        return self.active(now) and match_all(self.matchers, labels)

    def as_dict(self, now: float) -> dict[str, Any]:
        return {"id": self.id, "matchers": [str(m) for m in self.matchers],
                "author": self.author, "comment": self.comment, "created_at": self.created_at,
                "starts_at": self.starts_at, "ends_at": self.ends_at,
                "expired_by": self.expired_by, "state": self.state(now)}


# What changes when any replica creates or expires a silence: the cache is read again when it
# moved. Created rows add to the count; an early expiry sets expired_by and lowers ends_at.
_REVISION = ("SELECT count(*), COALESCE(max(created_at), 0), count(expired_by), "
             "COALESCE(sum(ends_at), 0) FROM silences")


class SilenceStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:", *,
                 max_s: float = 7 * 86400.0) -> None:
        super().__init__(target, _SCHEMA)
        self.max_s = max_s
        self._cache: list[Silence] | None = None
        self._revision: tuple[object, ...] = ()
        self._checked_at: float | None = None  # the `now` of muting's last look

    def create(self, matchers: list[str], author: str, comment: str, now: float, *,
               ends_at: float, starts_at: float | None = None) -> Silence:
        """Raises ValueError with the reason when the silence is not acceptable."""
        start = now if starts_at is None else starts_at
        if not matchers:
            raise ValueError("a silence needs at least one matcher")
        parsed = parse_all(matchers)
        if not any(m.op in ("=", "=~") and m.value not in ("", ".*", ".+") for m in parsed):
            raise ValueError("a silence needs one matcher that selects (= or =~ on a value), "
                             "so it cannot mute everything")
        if not author.strip() or not comment.strip():
            raise ValueError("a silence needs an author and a comment")
        if ends_at <= start:
            raise ValueError("a silence must end after it starts")
        if ends_at - start > self.max_s:
            raise ValueError(f"a silence may last at most {self.max_s:.0f} s")
        s = Silence(uuid.uuid4().hex, parsed, author.strip(), comment.strip(), now, start,
                    ends_at)
        with self._lock:
            self._db.execute("INSERT INTO silences (id, matchers, author, comment, created_at, "
                             "starts_at, ends_at, expired_by) VALUES (?,?,?,?,?,?,?,NULL)",
                             (s.id, json.dumps([str(m) for m in parsed]), s.author, s.comment,
                              now, start, ends_at))
            self._cache = None
        return s

    def expire(self, silence_id: str, actor: str, now: float) -> Silence:
        with self.transaction():
            row = self._db.execute("SELECT ends_at FROM silences WHERE id = ?",
                                   (silence_id,)).fetchone()
            if row is None:
                raise KeyError(silence_id)
            if row[0] > now:
                self._db.execute("UPDATE silences SET ends_at = ?, expired_by = ? WHERE id = ?",
                                 (now, actor, silence_id))
            self._cache = None
        got = self.get(silence_id)
        assert got is not None
        return got

    def get(self, silence_id: str) -> Silence | None:
        return next((s for s in self.all() if s.id == silence_id), None)

    def all(self) -> list[Silence]:
        """Every silence, newest first, as the database has them now (another replica may
        have created or expired one)."""
        with self._lock:
            return list(self._current(check=True))

    def _current(self, *, check: bool) -> list[Silence]:
        """The cached silences; `check`: first ask the database whether they changed."""
        if check or self._cache is None:
            revision = tuple(self._db.execute(_REVISION).fetchone())
            if revision != self._revision:
                self._cache = None
            self._revision = revision
        if self._cache is None:
            rows = self._db.execute(
                "SELECT id, matchers, author, comment, created_at, starts_at, ends_at, "
                "expired_by FROM silences ORDER BY created_at DESC").fetchall()
            self._cache = [Silence(r[0], parse_all(json.loads(r[1])), r[2], r[3], r[4],
                                   r[5], r[6], r[7]) for r in rows]
        return self._cache

    def muting(self, labels: Mapping[str, str], now: float) -> list[str]:
        """Ids of the silences that mute an alert with these labels now. A flush asks once
        per alert at one `now`: the database is asked for changes once per `now`."""
        with self._lock:
            fresh = now != self._checked_at
            self._checked_at = now
            found = self._current(check=fresh)
        return [s.id for s in found if s.mutes(labels, now)]
