"""Silences: matchers that mute notifications for a while, with an author, a comment and an
expiry (at most `max_s` ahead, so nothing is muted forever by mistake). Persisted in the shared
state (SQLite, or PostgreSQL shared by replicas); expiring one early keeps it for the record.

Matching runs in the scoring tick, so its cost is bounded: matchers are RE2 with the limits of
service.notify.matchers (at most MAX_MATCHERS per silence), and at most `max_active` silences
are active or pending at once. A stored silence those rules refuse (written before them: a
regex RE2 cannot run, too many matchers, an unreadable row) is loaded as invalid: listed with
its reason, logged once, never muting anything, and it can still be expired."""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.notify.matchers import MAX_MATCHERS, Matcher, match_all, parse_all
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

log = logging.getLogger(__name__)
MAX_TEXT = 1000  # characters of an author or a comment (the API's own limit)


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
    # Set when the stored matchers are refused by today's rules: the silence mutes nothing.
    invalid: str | None = None
    texts: tuple[str, ...] = ()  # the matchers as stored, when invalid (at most MAX_MATCHERS)

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def state(self, now: float) -> str:
        if now >= self.ends_at:
            return "expired"
        return "active" if now >= self.starts_at else "pending"

    def mutes(self, labels: Mapping[str, str], now: float) -> bool:
        return self.invalid is None and self.active(now) and match_all(self.matchers, labels)

    def as_dict(self, now: float) -> dict[str, Any]:
        shown = self.texts if self.invalid is not None else tuple(str(m) for m in self.matchers)
        return {"id": self.id, "matchers": list(shown),
                "author": self.author, "comment": self.comment, "created_at": self.created_at,
                "starts_at": self.starts_at, "ends_at": self.ends_at,
                "expired_by": self.expired_by, "state": self.state(now),
                "invalid": self.invalid}


def _text_ok(text: str) -> bool:
    """Storable: valid Unicode (no lone surrogate, which no database takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _load(row: tuple[Any, ...]) -> Silence:
    """A stored silence; one today's matcher rules refuse comes back invalid, with its
    reason, instead of raising (a restart must not fail on what an older release stored)."""
    sid, raw, author, comment, created, starts, ends, expired_by = row
    try:
        texts = json.loads(raw)
    except (TypeError, ValueError):
        texts = None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return Silence(sid, (), author, comment, created, starts, ends, expired_by,
                       invalid="its stored matchers are not a list of strings")
    try:
        matchers = parse_all(texts)
    except ValueError as e:
        shown = tuple(t[:200] for t in texts[:MAX_MATCHERS])
        return Silence(sid, (), author, comment, created, starts, ends, expired_by,
                       invalid=f"refused by today's matcher rules: {e}", texts=shown)
    return Silence(sid, matchers, author, comment, created, starts, ends, expired_by)


# What changes when any replica creates or expires a silence: the cache is read again when it
# moved. Created rows add to the count; an early expiry sets expired_by and lowers ends_at.
_REVISION = ("SELECT count(*), COALESCE(max(created_at), 0), count(expired_by), "
             "COALESCE(sum(ends_at), 0) FROM silences")


class SilenceStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:", *,
                 max_s: float = 7 * 86400.0, max_active: int = 1000) -> None:
        super().__init__(target, _SCHEMA)
        self.max_s = max_s
        self.max_active = max_active  # active or pending at once
        self._logged: set[str] = set()  # invalid silences already logged
        self._cache: list[Silence] | None = None
        self._revision: tuple[object, ...] = ()
        self._checked_at: float | None = None  # the `now` of muting's last look

    def create(self, matchers: list[str], author: str, comment: str, now: float, *,
               ends_at: float, starts_at: float | None = None) -> Silence:
        """Raises ValueError with the reason when the silence is not acceptable."""
        start = now if starts_at is None else starts_at
        if not matchers:
            raise ValueError("a silence needs at least one matcher")
        if len(matchers) > MAX_MATCHERS:
            raise ValueError(f"a silence has at most {MAX_MATCHERS} matchers, not "
                             f"{len(matchers)}")
        parsed = parse_all(matchers)
        if not any(m.op in ("=", "=~") and m.value not in ("", ".*", ".+") for m in parsed):
            raise ValueError("a silence needs one matcher that selects (= or =~ on a value), "
                             "so it cannot mute everything")
        if not author.strip() or not comment.strip():
            raise ValueError("a silence needs an author and a comment")
        if len(author) > MAX_TEXT or len(comment) > MAX_TEXT:
            raise ValueError(f"a silence's author and comment have at most {MAX_TEXT} "
                             "characters")
        if not _text_ok(author) or not _text_ok(comment):
            raise ValueError("a silence's author and comment must be valid Unicode")
        if not (math.isfinite(start) and math.isfinite(ends_at)):
            raise ValueError("a silence starts and ends at finite times")
        if start > now + self.max_s:
            raise ValueError(f"a silence may start at most {self.max_s:.0f} s ahead")
        if ends_at <= start:
            raise ValueError("a silence must end after it starts")
        if ends_at - start > self.max_s:
            raise ValueError(f"a silence may last at most {self.max_s:.0f} s")
        s = Silence(uuid.uuid4().hex, parsed, author.strip(), comment.strip(), now, start,
                    ends_at)
        with self._lock:
            live = sum(1 for x in self._current(check=True) if x.ends_at > now)
            if live >= self.max_active:
                raise ValueError(f"{live} silences are active or pending, the most this "
                                 f"service holds (notify.silence_max_active); expire some")
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
            self._cache = [_load(tuple(r)) for r in rows]
            for x in self._cache:
                if x.invalid is not None and x.id not in self._logged:
                    self._logged.add(x.id)
                    log.warning("silence %s is ignored (it mutes nothing): %s", x.id,
                                x.invalid)
        return self._cache

    def muting(self, labels: Mapping[str, str], now: float) -> list[str]:
        """Ids of the silences that mute an alert with these labels now. A flush asks once
        per alert at one `now`: the database is asked for changes once per `now`."""
        with self._lock:
            fresh = now != self._checked_at
            self._checked_at = now
            found = self._current(check=fresh)
        return [s.id for s in found if s.mutes(labels, now)]
