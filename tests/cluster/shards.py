"""Shard services on loopback for tests: each a real uvicorn server in a thread, with its own
data directory and `cluster` settings naming every shard's loopback URL."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from collectors.frames import Entity
from service.api.app import create_app
from service.cluster.shard_map import ShardMap
from service.settings import Settings
from tests.support.fleet import T0

TOKEN = "shard-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Shards:
    """Shards `ids`, started and stopped one by one; `apps[id]` is the running app."""

    def __init__(self, root: Path, ids: tuple[str, ...] = ("a", "b", "c")) -> None:
        self.root, self.ids = root, ids
        self.ports = {sid: free_port() for sid in ids}
        self.urls = {sid: f"http://127.0.0.1:{p}" for sid, p in self.ports.items()}
        self.apps: dict[str, Any] = {}
        self._servers: dict[str, tuple[uvicorn.Server, threading.Thread]] = {}

    def settings(self, sid: str) -> Settings:
        return Settings(storage={"data_dir": self.root / sid},  # type: ignore[arg-type]
                        ingest={"tokens": [TOKEN], "coalesce_ms": 5},  # type: ignore[arg-type]
                        cluster={"shard_id": sid,  # type: ignore[arg-type]
                                 "shards": [{"id": i, "url": u} for i, u in self.urls.items()]})

    def map(self) -> ShardMap:
        got = ShardMap.from_settings(self.settings(self.ids[0]).cluster)
        assert got is not None
        return got

    def hosts(self, per_shard: int = 1) -> dict[str, list[str]]:
        """Host names owned by each shard, `per_shard` of each."""
        m = self.map()
        out: dict[str, list[str]] = {sid: [] for sid in self.ids}
        i = 0
        while any(len(v) < per_shard for v in out.values()):
            host = f"node{i:04d}"
            owned = out[m.owner(host).id]
            if len(owned) < per_shard:
                owned.append(host)
            i += 1
        return out

    def start(self, sid: str) -> None:
        app = create_app(self.settings(sid), clock=lambda: T0 + 1, schedule=False)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.ports[sid],
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        # Generous: a loaded machine (the fuzz benchmark runs a dozen senders beside it)
        # can take tens of seconds to start a shard in a thread of a busy process.
        deadline = time.monotonic() + 60
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not server.started:
            # A daemon server thread left running at interpreter exit can crash the process.
            server.should_exit = True
            thread.join(timeout=20)
            raise AssertionError(f"shard {sid} did not start (thread alive: "
                                 f"{thread.is_alive()})")
        self.apps[sid] = app
        self._servers[sid] = (server, thread)

    def stop(self, sid: str) -> None:
        server, thread = self._servers.pop(sid)
        server.should_exit = True
        thread.join(timeout=20)
        self.apps.pop(sid)

    def stop_all(self) -> None:
        for sid in list(self._servers):
            self.stop(sid)

    def holds(self, sid: str, key: str) -> bool:
        """Whether shard `sid`'s window store holds entity `key`."""
        store = self.apps[sid].state.gpuhealth.pipeline.store
        e = Entity.parse(key)
        return store[e.scope].slot(e) is not None

    def holders(self, key: str) -> list[str]:
        return [sid for sid in self.apps if self.holds(sid, key)]
