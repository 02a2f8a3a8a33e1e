"""Repeat offenders (issue 32): nodes, and the GPUs on them, that came back from a repair and
failed again soon after. Another drain, test and release of such a node hands the same bad
board back to the scheduler; the gate holds it instead, until an operator says its hardware
was replaced.

What counts (times are the shared state's epoch seconds):

- A release: the remediation audit's `released` row of the node (a release of gpuhealth's
  drain went through: the node was back at work). A `gate_skipped` row on the same drain
  before it marks the release untested (an operator let it go without the gate's tests).
- A failure: a drain of the node (a `migrate` action that succeeded), at the time its alert
  asked for it; or a diagnostic run on it that failed (a sweep's, an operator's, a later
  gate's), at the time it finished. An error (the test could not run) is not a failure.
- A return: the first failure after a release and before the next release, `days` after the
  release. A release has one return at most: the drain and the failed gate run that follow
  it are the same coming back.
- A GPU's return: a failing check naming the GPU (`Check.gpu`) in a failed run after a
  release, before the next and within `window_days` of it.
- Counted: returns within `soon_days` and within `window_days` of their release, over the
  releases of the last `lookback_days` after the node's last `replaced` row (an operator's
  word that its hardware was replaced: what came before was another board's history).

Flagged "needs hardware replacement": a return within `soon_days` of its release, or
`replace_after` returns within `window_days` of theirs. The gate then neither tests nor
releases the node (`Offenders.hold`, audited once per drain as `needs_replacement`) until
`replaced` clears the flag (POST /v1/nodes/{node}/replaced, audited); an operator may still
release it untested with a reason (`skip_gate`), as any other node.

A node's record is read fresh (the gate, the node's API answer: a few indexed rows); the
fleet's list (the API's, /metrics') is computed in three queries and reused for `cache_s`."""

from __future__ import annotations

import bisect
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from collectors.diagnostics.result import describe, failing, from_dict
from service.diagnostics.runs import RunStore
from service.remediation.actions import Action, ActionStore, AuditEntry

log = logging.getLogger(__name__)
DAY = 86400.0
HOLD_EVENT = "needs_replacement"  # the gate held a drain's release for it (audited once)
REPLACED_EVENT = "replaced"  # an operator cleared the flag: the hardware was replaced
_EVENTS = ("released", "gate_skipped", REPLACED_EVENT)


class OffenderSettings(BaseModel):
    """When a node that failed again after a release needs its hardware replaced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    soon_days: float = Field(default=7.0, ge=0, le=365, description=(
        "a failure this soon after a release flags the node at once (0: never)"))
    window_days: float = Field(default=30.0, gt=0, le=365, description=(
        "returns counted toward replace_after: within this many days of their release"))
    replace_after: int = Field(default=2, ge=0, le=100, description=(
        "this many returns within window_days flag the node (0: never)"))
    lookback_days: float = Field(default=365.0, gt=0, le=3650, description=(
        "releases older than this are forgotten"))
    cache_s: float = Field(default=60.0, ge=0, le=3600, description=(
        "how long the fleet's list (the API's and /metrics') is reused"))

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.soon_days > self.window_days:
            raise ValueError("soon_days must not exceed window_days")
        if self.window_days > self.lookback_days:
            raise ValueError("window_days must not exceed lookback_days")
        return self


# -- what a record is computed from ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Release:
    at: float
    drain_id: str
    untested: str = ""  # the operator's reason when the gate was skipped; "" tested


@dataclass(frozen=True, slots=True)
class Failure:
    at: float
    evidence: str
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Replaced:
    at: float
    actor: str
    reason: str


@dataclass(slots=True)
class History:
    releases: list[Release] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    replaced: Replaced | None = None  # the newest


# -- what a record says ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Return:
    released_at: float
    failed_at: float
    evidence: str
    untested: str
    gpus: tuple[int, ...]

    @property
    def days(self) -> float:
        return (self.failed_at - self.released_at) / DAY

    def as_dict(self) -> dict[str, Any]:
        return {"released_at": self.released_at, "failed_at": self.failed_at,
                "days": round(self.days, 3), "evidence": self.evidence,
                "untested": self.untested or None, "gpus": list(self.gpus)}


@dataclass(frozen=True, slots=True)
class GpuReturns:
    gpu: int
    returns_soon: int
    returns_window: int
    last_failed_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "returns_soon": self.returns_soon,
                "returns_window": self.returns_window, "last_failed_at": self.last_failed_at}


@dataclass(frozen=True, slots=True)
class Record:
    node: str
    releases: int  # counted (after the last replacement, within the lookback)
    last_release_at: float | None
    returns: tuple[Return, ...]  # newest first
    returns_soon: int
    returns_window: int
    gpus: tuple[GpuReturns, ...]
    flagged: bool
    why: str  # why it is flagged; "" when not
    replaced: Replaced | None

    @property
    def last_failed_at(self) -> float:
        return self.returns[0].failed_at if self.returns else -math.inf

    def as_dict(self, settings: OffenderSettings, *, returns: int = 20) -> dict[str, Any]:
        """JSON-ready; times as epoch seconds (the API stamps them)."""
        r = self.replaced
        return {"node": self.node, "flagged": self.flagged, "why": self.why or None,
                "soon_days": settings.soon_days, "window_days": settings.window_days,
                "replace_after": settings.replace_after, "releases": self.releases,
                "last_release_at": self.last_release_at,
                "returns_soon": self.returns_soon, "returns_window": self.returns_window,
                "returns": [x.as_dict() for x in self.returns[:returns]],
                "gpus": [g.as_dict() for g in self.gpus],
                "replaced": None if r is None else {"at": r.at, "by": r.actor,
                                                    "reason": r.reason}}


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def record(node: str, history: History, settings: OffenderSettings, now: float) -> Record:
    """A node's repeat-offender record from its history (see the module docstring)."""
    since = now - settings.lookback_days * DAY
    replaced = history.replaced
    if replaced is not None:
        since = max(since, replaced.at)
    releases = sorted((r for r in history.releases if since <= r.at <= now), key=lambda r: r.at)
    fails = sorted((f for f in history.failures if since < f.at <= now), key=lambda f: f.at)
    times = [f.at for f in fails]
    window = settings.window_days * DAY
    returns: list[Return] = []
    per_gpu: dict[int, list[float]] = {}  # gpu -> days of its returns
    last_gpu: dict[int, float] = {}
    for i, rel in enumerate(releases):
        end = releases[i + 1].at if i + 1 < len(releases) else math.inf
        lo = bisect.bisect_right(times, rel.at)
        hi = bisect.bisect_right(times, end)
        after = fails[lo:hi]
        if not after:
            continue
        seen: dict[int, float] = {}  # each GPU's first failure after this release
        for f in after:
            if f.at - rel.at > window:
                break
            for g in f.gpus:
                seen.setdefault(g, f.at)
        for g, at in seen.items():
            per_gpu.setdefault(g, []).append((at - rel.at) / DAY)
            last_gpu[g] = max(last_gpu.get(g, -math.inf), at)
        returns.append(Return(rel.at, after[0].at, after[0].evidence, rel.untested,
                              tuple(sorted(seen))))
    returns.reverse()
    soon = [x for x in returns if x.days <= settings.soon_days] if settings.soon_days else []
    within = [x for x in returns if x.days <= settings.window_days]
    why = ""
    if soon:
        why = f"needs hardware replacement: {_told(soon[0])}"
    elif settings.replace_after and len(within) >= settings.replace_after:
        why = (f"needs hardware replacement: failed again {len(within)} times within "
               f"{settings.window_days:g} days of a release; the last {_told(within[0])}")
    gpus = tuple(GpuReturns(g, sum(d <= settings.soon_days for d in days) if settings.soon_days
                            else 0, len(days), last_gpu[g])
                 for g, days in sorted(per_gpu.items()))
    return Record(node=node, releases=len(releases),
                  last_release_at=releases[-1].at if releases else None,
                  returns=tuple(returns), returns_soon=len(soon), returns_window=len(within),
                  gpus=gpus, flagged=bool(why), why=why, replaced=replaced)


def _told(x: Return) -> str:
    untested = f"; that release skipped the gate: {x.untested}" if x.untested else ""
    return (f"failed again {x.days:.1f} days after its release on {_date(x.released_at)} "
            f"({x.evidence}){untested}")


# -- reading the shared state ------------------------------------------------------------------

def _clip(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _run_failure(run_id: int, suite: str, at: float, raw: str | None) -> Failure:
    try:
        result = from_dict(json.loads(raw)) if raw else None
    except ValueError:
        result = None
    bad = failing(result) if result is not None else ()
    what = "; ".join(describe(c) for c in bad[:3]) or "no failing check recorded"
    gpus = tuple(sorted({c.gpu for c in bad if c.gpu is not None}))
    return Failure(at, _clip(f"diagnostic run {run_id}: {suite} failed: {what}"), gpus)


class Offenders:
    def __init__(self, settings: OffenderSettings, actions: ActionStore, runs: RunStore, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.actions, self.runs = settings, actions, runs
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Record]] | None = None  # (monotonic, records)

    def histories(self, now: float, node: str | None = None) -> dict[str, History]:
        """Each node's releases, failures and last replacement in the lookback (one node's
        with `node`)."""
        since = now - self.settings.lookback_days * DAY
        where, args = ("", ()) if node is None else (" AND node = ?", (node,))
        out: dict[str, History] = {}
        skipped: dict[str, str] = {}  # drain id -> the operator's reason, until its release
        with self.actions.read() as db:
            audit = db.execute(
                "SELECT node, at, event, action_id, actor, result FROM audit WHERE event IN "
                f"(?, ?, ?) AND at >= ?{where} ORDER BY seq", (*_EVENTS, since, *args)
            ).fetchall()
            drains = db.execute(
                "SELECT id, node, requested_at, summary FROM actions WHERE kind = 'migrate' "
                f"AND state = 'succeeded' AND requested_at >= ?{where}", (since, *args)
            ).fetchall()
        with self.runs.transaction() as db:
            runs = db.execute(
                "SELECT id, node, suite, finished_at, result FROM diagnostic_runs WHERE "
                f"status = 'fail' AND finished_at >= ?{where}", (since, *args)).fetchall()
        for n, at, event, aid, actor, result in audit:
            if n is None:
                continue
            h = out.setdefault(n, History())
            if event == "gate_skipped":
                skipped[aid or ""] = result
            elif event == "released":
                h.releases.append(Release(float(at), aid or "", skipped.pop(aid or "", "")))
            else:
                h.replaced = Replaced(float(at), actor, result)
        for aid, n, at, summary in drains:
            out.setdefault(n, History()).failures.append(
                Failure(float(at), _clip(f"drained again by {aid}: {summary}")))
        for rid, n, suite, at, raw in runs:
            out.setdefault(n, History()).failures.append(
                _run_failure(int(rid), suite, float(at), raw))
        return out

    def of(self, node: str, now: float) -> Record:
        """The node's record, read fresh."""
        return record(node, self.histories(now, node).get(node, History()), self.settings, now)

    def fleet(self, now: float) -> list[Record]:
        """Flagged nodes and those that came back and failed again, flagged first, then the
        newest return first; reused for `cache_s`."""
        with self._lock:
            got = self._cached
            if got is not None and self._monotonic() - got[0] < self.settings.cache_s:
                return got[1]
        recs = [record(n, h, self.settings, now) for n, h in self.histories(now).items()]
        found = sorted((r for r in recs if r.flagged or r.returns),
                       key=lambda r: (not r.flagged, -r.last_failed_at, r.node))
        with self._lock:
            self._cached = (self._monotonic(), found)
        return found

    def forget(self) -> None:
        """Drop the fleet's cached list (after a change this process made)."""
        with self._lock:
            self._cached = None

    # -- the gate's question and the operator's answer -------------------------------------

    def hold(self, drain: Action, now: float) -> str | None:
        """Why the node `drain` holds must not be tested and released (it needs its hardware
        replaced), or None. Audited on the drain the first time."""
        rec = self.of(drain.node, now)
        if not rec.flagged:
            return None
        if not self.actions.has_audit(drain.id, HOLD_EVENT):
            self.actions.append_audit(AuditEntry(
                at=now, actor="gate", event=HOLD_EVENT, action_id=drain.id, node=drain.node,
                mode=drain.mode, result=rec.why[:2000]))
            log.warning("%s: %s", drain.node, rec.why)
        return (f"{rec.why}; not testing it again: once its hardware is replaced, say so "
                f"(POST /v1/nodes/{drain.node}/replaced)")

    def replaced(self, node: str, actor: str, reason: str, now: float) -> Record:
        """An operator's word that the node's hardware was replaced: its history so far no
        longer counts (audited)."""
        drains = self.actions.drains(node)
        self.actions.append_audit(AuditEntry(
            at=now, actor=actor, event=REPLACED_EVENT, action_id=drains[0].id if drains else None,
            node=node, result=reason.strip()[:500]))
        self.forget()
        return self.of(node, now)

    def known(self, node: str) -> bool:
        """Whether the remediation or the diagnostics ever named the node."""
        with self.actions.read() as db:
            if db.execute("SELECT 1 FROM actions WHERE node = ? LIMIT 1",
                          (node,)).fetchone() is not None:
                return True
        return bool(self.runs.for_node(node, 1))
