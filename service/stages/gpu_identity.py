"""Each GPU's identity, kept once per change: which board (UUID, serial) sits in each GPU slot
(`node:gpuN`), with its bus id, model, VBIOS and driver, and the boards that sat there before.

Sources say a GPU's identity every round or now and then (collectors.identity); most rounds
change nothing and cost a dictionary lookup. What `observe` reports:

- `new`: the first identity of a slot;
- `changed`: an attribute of the same board changed or was said for the first time (a driver
  upgrade, a VBIOS flash, the serial that dcgm-exporter never says arriving from nvidia-smi);
- `swapped`: another board in the slot (its serial or UUID differs from the one before, both
  said): the old board's row is closed and its open failures are closed by the labeller, as a
  counter that restarts lower does (service.stages.ingest);
- `renumbered`: the slot now holds a board this node had in another slot (a GPU fell off the
  bus and the driver numbered the rest down): not a swap, nothing is closed.

An identity older (by its sender's clock, compared only with the same slot's) than the one held
that disagrees with it is late (a spool drained after a swap) and ignored. Replicas of a shard
observe the same identities: a swap re-reads the slot's row inside the write transaction and
adopts what another replica already wrote, so each board has one row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from collectors.frames import Entity
from collectors.identity import FIELDS, GpuIdentity
from service.storage.sql import Database
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS gpu_boards (
    entity TEXT NOT NULL,           -- the GPU slot: n1:gpu3
    node TEXT NOT NULL,
    since REAL NOT NULL,            -- server time the board was first seen in the slot
    until_ts REAL,                  -- server time it was seen replaced (NULL: still there)
    uuid TEXT NOT NULL DEFAULT '',
    serial TEXT NOT NULL DEFAULT '',
    pci_bus_id TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    vbios TEXT NOT NULL DEFAULT '',
    driver TEXT NOT NULL DEFAULT '',
    changed REAL NOT NULL,          -- server time an attribute last changed
    said_at REAL NOT NULL,          -- the sender's time of the newest identity taken
    why TEXT NOT NULL DEFAULT '',   -- how it came: new, swapped (serial a -> b), renumbered
    PRIMARY KEY (entity, since)
);
CREATE INDEX IF NOT EXISTS gpu_boards_node ON gpu_boards (node);
"""
MAX_BOARDS = 8  # per slot, remembered in memory (the table keeps them all)
# Changes a slot may make in an hour. Two sources that disagree (an exporter numbering GPUs
# otherwise than nvidia-smi, two spellings of one model) would flip a slot every round, a row
# write and an InfluxDB point each time: past the budget a slot's changes are held (and said,
# once an hour) until the hour has room again.
MAX_CHANGES_PER_HOUR = 6
Kind = Literal["new", "changed", "swapped", "renumbered"]


@dataclass(frozen=True, slots=True)
class Board:
    """One board's time in one slot."""

    identity: GpuIdentity
    since: float
    changed: float
    until: float | None = None
    why: str = "new"


@dataclass(frozen=True, slots=True)
class Change:
    entity: str
    kind: Kind
    identity: GpuIdentity  # the slot's identity after the change
    why: str  # in words: "serial 1650522003820 -> 1650522009999", "driver 535 -> 550"


class GpuIdentities(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, SCHEMA)
        self._boards: dict[str, list[Board]] = {}
        self.late = 0  # identities ignored as older than the one held
        self.held = 0  # changes held back by a slot's hourly budget
        self._changes: dict[str, list[float]] = {}  # slot -> times of its recent changes
        self._warned: dict[str, float] = {}
        self._load()

    def _load(self) -> None:
        with self._lock:
            rows = self._db.execute(
                f"SELECT entity, since, until_ts, changed, why, said_at, {', '.join(FIELDS)} "
                f"FROM gpu_boards ORDER BY entity, since").fetchall()
        for entity, since, until, changed, why, said_at, *values in rows:
            ident = GpuIdentity(**dict(zip(FIELDS, values, strict=True)), at=float(said_at))
            self._remember(entity, Board(ident, float(since), float(changed),
                                         None if until is None else float(until), why))

    def _remember(self, entity: str, board: Board) -> None:
        boards = self._boards.setdefault(entity, [])
        boards.append(board)
        del boards[:-MAX_BOARDS]

    # ---- reads -------------------------------------------------------------------------

    def current(self, entity: str) -> GpuIdentity | None:
        """The identity of the board in a GPU slot now (an NVLink key names its GPU's)."""
        boards = self._boards.get(_gpu_key(entity))
        return boards[-1].identity if boards else None

    def boards(self, entity: str) -> list[Board]:
        """The slot's boards, oldest first, the current last."""
        return list(self._boards.get(_gpu_key(entity), ()))

    def at(self, entity: str, ts: float) -> GpuIdentity | None:
        """The board that sat in the slot at `ts` (an alert's start: the board that failed,
        not the one that replaced it). Before the first board was seen (an identity said
        after the alert opened), the first board."""
        boards = self._boards.get(_gpu_key(entity))
        if not boards:
            return None
        for b in reversed(boards):
            if b.since <= ts:
                return b.identity
        return boards[0].identity

    def all_current(self) -> dict[str, GpuIdentity]:
        return {k: b[-1].identity for k, b in self._boards.items() if b}

    def __len__(self) -> int:
        return len(self._boards)

    # ---- writes ------------------------------------------------------------------------

    def observe(self, said: Mapping[str, GpuIdentity], now: float) -> list[Change]:
        """Take a batch's identities (GPU key -> what was said); the changes, in key order."""
        out: list[Change] = []
        for entity in sorted(said):
            change = self._one(entity, said[entity], now)
            if change is not None:
                out.append(change)
                self._spent(entity, now)
        for c in out:
            level = logging.WARNING if c.kind == "swapped" else logging.INFO
            log.log(level, "GPU %s %s: %s", c.entity, c.kind, c.why)
        return out

    def forget_nodes(self, nodes: set[str]) -> None:
        """Forget the slots of nodes the window store forgot, in memory (the table keeps
        their boards: a node that comes back with the same boards finds its rows)."""
        for key in [k for k in self._boards if k.rpartition(":")[0] in nodes]:
            del self._boards[key]

    def _spent(self, entity: str, now: float) -> None:
        times = self._changes.setdefault(entity, [])
        times.append(now)
        del times[:-MAX_CHANGES_PER_HOUR]

    def _budget_left(self, entity: str, now: float, what: str) -> bool:
        """Whether the slot may change again now; past its budget, say so once an hour."""
        times = self._changes.get(entity, [])
        if len(times) < MAX_CHANGES_PER_HOUR or now - times[0] >= 3600.0:
            return True
        self.held += 1
        if now - self._warned.get(entity, -float("inf")) >= 3600.0:
            self._warned[entity] = now
            log.warning("GPU %s: its sources keep changing its identity (%d changes within "
                        "an hour; now %s): further changes are held for the hour; check that "
                        "every source numbers the node's GPUs alike", entity, len(times), what)
        return False

    def _one(self, entity: str, ident: GpuIdentity, now: float) -> Change | None:
        if not ident:
            return None
        boards = self._boards.get(entity)
        cur = boards[-1] if boards else None
        if cur is None:
            return self._write(entity, ident, now, "new", "new")
        old = cur.identity
        other = old.board_change(ident)
        if other is not None and ident.at < old.at:
            self.late += 1
            return None
        if other is None:
            merged = old.merged(ident)
            if merged == old:
                return None
            if not self._budget_left(entity, now, _diff(old, merged)):
                return None
            return self._write(entity, merged, now, "changed", _diff(old, merged))
        if not self._budget_left(entity, now, other):
            return None
        moved = self._held_elsewhere(entity, ident)
        if moved is not None:
            return self._write(entity, ident, now, "renumbered",
                               f"the board of {moved} ({_name(ident)}) now answers as "
                               f"{entity}: renumbered, not swapped")
        return self._write(entity, ident, now, "swapped", other)

    def _held_elsewhere(self, entity: str, ident: GpuIdentity) -> str | None:
        """Another slot of the same node whose current board is this one."""
        node = entity.rpartition(":")[0]
        for key, boards in self._boards.items():
            if (key != entity and key.startswith(node + ":") and boards
                    and _same_board(boards[-1].identity, ident)):
                return key
        return None

    def _write(self, entity: str, ident: GpuIdentity, now: float, kind: Kind,
               why: str) -> Change:
        node = Entity.parse(entity).node
        with self.transaction() as db:
            if kind == "changed":
                cur = self._boards[entity][-1]
                db.execute(
                    f"UPDATE gpu_boards SET {', '.join(f'{f} = ?' for f in FIELDS)}, "
                    f"changed = ?, said_at = ? WHERE entity = ? AND since = ?",
                    (*_values(ident), now, ident.at, entity, cur.since))
                board = replace(cur, identity=ident, changed=now)
                self._boards[entity][-1] = board
                return Change(entity, kind, ident, why)
            there = _current_row(db, entity)
            if there is not None and there.identity.board_change(ident) is None:
                # This board's row is there already (another replica wrote it, or this one
                # before it forgot the node): adopt it, with what was said on top.
                merged = there.identity.merged(ident)
                if merged != there.identity:
                    db.execute(
                        f"UPDATE gpu_boards SET {', '.join(f'{f} = ?' for f in FIELDS)}, "
                        f"changed = ?, said_at = ? WHERE entity = ? AND since = ?",
                        (*_values(merged), now, merged.at, entity, there.since))
                self._remember_current(entity, replace(there, identity=merged))
                return Change(entity, kind, merged, why)
            if there is not None:
                db.execute("UPDATE gpu_boards SET until_ts = ? WHERE entity = ? AND since = ?",
                           (now, entity, there.since))
            since = max(now, there.since + 1e-3) if there is not None else now
            db.execute(
                f"INSERT INTO gpu_boards (entity, node, since, until_ts, {', '.join(FIELDS)}, "
                f"changed, said_at, why) VALUES (?, ?, ?, NULL, "
                f"{', '.join('?' for _ in FIELDS)}, ?, ?, ?) ON CONFLICT (entity, since) "
                f"DO NOTHING",
                (entity, node, since, *_values(ident), now, ident.at,
                 kind if kind != "swapped" else f"swapped ({why})"))
        boards = self._boards.get(entity)
        if boards:
            boards[-1] = replace(boards[-1], until=now)
        self._remember(entity, Board(ident, since, now, None,
                                     kind if kind != "swapped" else f"swapped ({why})"))
        return Change(entity, kind, ident, why)

    def _remember_current(self, entity: str, board: Board) -> None:
        boards = self._boards.setdefault(entity, [])
        if boards and boards[-1].since == board.since:
            boards[-1] = board
        else:
            if boards:
                boards[-1] = replace(boards[-1], until=board.since)
            self._remember(entity, board)


def _current_row(db: Database, entity: str) -> Board | None:
    row = db.execute(
        f"SELECT since, changed, why, said_at, {', '.join(FIELDS)} FROM gpu_boards "
        f"WHERE entity = ? AND until_ts IS NULL ORDER BY since DESC LIMIT 1",
        (entity,)).fetchone()
    if row is None:
        return None
    since, changed, why, said_at, *values = row
    return Board(GpuIdentity(**dict(zip(FIELDS, values, strict=True)), at=float(said_at)),
                 float(since), float(changed), None, why)


def _values(ident: GpuIdentity) -> tuple[str, ...]:
    return tuple(getattr(ident, f) for f in FIELDS)


def _same_board(a: GpuIdentity, b: GpuIdentity) -> bool:
    """Both name a UUID or serial and every one both name agrees."""
    named = [f for f in ("uuid", "serial") if getattr(a, f) and getattr(b, f)]
    return bool(named) and all(getattr(a, f) == getattr(b, f) for f in named)


def _diff(old: GpuIdentity, new: GpuIdentity) -> str:
    parts = []
    for f in FIELDS:
        a, b = getattr(old, f), getattr(new, f)
        if a != b:
            parts.append(f"{f} {a} -> {b}" if a else f"{f} {b}")
    return ", ".join(parts)


def _name(ident: GpuIdentity) -> str:
    return (f"serial {ident.serial}" if ident.serial else f"UUID {ident.uuid}" if ident.uuid
            else "?")


def _gpu_key(entity: str) -> str:
    """`n1:gpu3:nvlink2` -> `n1:gpu3`; other keys as they are."""
    head, _, tail = entity.rpartition(":")
    return head if tail.startswith("nvlink") and ":gpu" in head else entity
