"""Changes to the shared-state stores' tables, each written once for SQLite and PostgreSQL.

A store creates its tables when they are missing, in their current shape (`CREATE ... IF NOT
EXISTS` in portable SQL, service.storage.sql), so a fresh database needs no migration; the same
statements run at every open, so a new table or a new `CREATE INDEX IF NOT EXISTS` reaches an
older database without one either. When a table a store already has changes (a column, a type,
a constraint, rows to rewrite), what an older release left behind must change the same way:
that is one StateChange, appended to CHANGES. It is written in the same portable words as the
stores (SQLite's DDL, translated for PostgreSQL by `pg_ddl`), or as a function over the dialect
layer's Database for what SQL alone cannot say; it runs only where its table exists (a missing
one is created by its store in its new shape afterwards). A change raises PostgreSQL's layout
version, which releases before it refuse: keep what older replicas can live with (an index) in
the stores' CREATE statements alone.

Each change then runs in both places: the SQLite file lists it among its migrations at the
file's own version (service.storage.schema.MIGRATIONS: that numbering also counts the sample
tables' changes), and PostgreSQL's shared state is at layout `1 + len(CHANGES)` once all have
run (service.storage.pg_schema). tests/storage/test_pg_migrations.py fails when the two lists
differ, or when a store's CREATE changed without a change here (an upgraded database must end
with the layout of a fresh one, on both).

Why an ordered list and not Alembic: the stores are plain SQL on a thin dialect layer, not
SQLAlchemy models, so Alembic's autogenerate has nothing to compare, and its revision graph,
env.py and SQLAlchemy dependency would be a second migration idiom beside SQLite's ordered
`user_version` migrations, which the same list now feeds. The shared state is control-plane
sized; the ordered list runs in the one transaction under the advisory lock every shared-state
writer already takes, which is what replicas starting together need."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.storage.sql import Database, statements

Step = str | Callable[[Database], None]


@dataclass(frozen=True, slots=True)
class StateChange:
    table: str  # the table it changes: nothing runs where it does not exist yet
    summary: str
    # Portable DDL/DML (`;`-separated, SQLite's words), or a function for what SQL cannot say
    # (it may look at db.dialect). Runs inside the caller's transaction: never commits.
    steps: tuple[Step, ...]

    def apply(self, db: Database) -> None:
        if not db.columns(self.table):
            return
        for step in self.steps:
            if callable(step):
                step(db)
                continue
            for statement in statements(step, db.dialect):
                db.execute(statement)


# In order; never edit or reorder a released one (databases have run it): append. Empty so
# far: the shared state's tables are as the stores first created them (layout 1).
CHANGES: tuple[StateChange, ...] = ()
