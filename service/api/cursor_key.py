"""The key that signs pagination cursors (service.api.paging): random, made once and kept in
the shared state, so every replica and shard of a fleet signs and checks cursors with one key
(a merged page's cursor is handed to any shard) and a restart keeps the cursors it gave valid.
Whoever reads the state database can read the key; whoever cannot, cannot forge a cursor."""

from __future__ import annotations

import secrets

from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    name TEXT PRIMARY KEY,       -- what the key signs ('cursor')
    secret TEXT NOT NULL         -- hex
);
"""
KEY_BYTES = 32


class KeyStore(StateStore):
    def __init__(self, target: StateTarget) -> None:
        super().__init__(target, _SCHEMA)

    def key(self, name: str) -> bytes:
        """The key named `name`, made on first use; the transaction makes concurrent first
        uses (two shards starting) agree on one."""
        with self.transaction() as db:
            row = db.execute("SELECT secret FROM api_keys WHERE name = ?", (name,)).fetchone()
            if row is None:
                made = secrets.token_hex(KEY_BYTES)
                db.execute("INSERT INTO api_keys (name, secret) VALUES (?, ?)", (name, made))
                return bytes.fromhex(made)
        return bytes.fromhex(str(row[0]))


def load(target: StateTarget, name: str = "cursor") -> bytes:
    store = KeyStore(target)
    try:
        return store.key(name)
    finally:
        store.close()
