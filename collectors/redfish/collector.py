"""RedfishCollector: the poller on a background thread, its points handed over at collect().

Out of band (a central poller on the management network): `bmcs` or `bmc_file` lists each
node with its BMC's address, and points are tagged with the node's name. In band (the node
agent reading its own BMC through the Redfish host interface, DSP0270): `url` gives the host
interface's address and the points are tagged with this host's name.

The collector is up while its last read of at least one BMC succeeded (or none has finished
yet); down, its reason names the unreachable BMCs. Credentials come from `credentials_file`
or the environment (collectors.redfish.secret), never from the settings themselves.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.base import CollectorStatus
from collectors.frames import Batch, Rejection
from collectors.lineprotocol import Point
from collectors.redfish import secret, targets
from collectors.redfish.poller import Poller, PollerConfig
from collectors.redfish.targets import Bmc
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

MAX_QUEUED = 1_000_000  # points held between collects; the oldest go first past it
_CONFIG_KEYS = frozenset(PollerConfig.__dataclass_fields__)
KEYS = _CONFIG_KEYS | {"bmcs", "bmc_file", "url", "credentials_file", "username_env",
                       "password_env", "name"}


class RedfishCollector:
    def __init__(self, host: str, bmcs: list[Bmc], credentials: secret.CredentialStore,
                 config: PollerConfig, *, name: str = "redfish") -> None:
        if not bmcs:
            raise ValueError("no BMC to read: give bmcs, bmc_file (out of band) or url (in band)")
        self.host, self.name = host, name
        self.status = CollectorStatus()
        self.poller = Poller(bmcs, credentials, config, self._emit)
        self._queue: deque[Point] = deque(maxlen=MAX_QUEUED)
        self._rejected: deque[Rejection] = deque(maxlen=10_000)
        self._lock = threading.Lock()
        self._mapper = SchemaMapper()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @classmethod
    def from_config(cls, host: str, cfg: Mapping[str, Any]) -> RedfishCollector:
        unknown = sorted(set(cfg) - KEYS)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: "
                             f"{', '.join(sorted(KEYS))})")
        bmcs: list[Bmc] = []
        if cfg.get("url"):
            bmcs.append(targets.bmc(host, str(cfg["url"])))
        bmcs += targets.from_settings(cfg.get("bmcs", []))
        if cfg.get("bmc_file"):
            bmcs += targets.from_file(Path(cfg["bmc_file"]))
        file = cfg.get("credentials_file")
        creds = secret.load(Path(file) if file else None,
                            user_env=cfg.get("username_env", secret.USER_ENV),
                            password_env=cfg.get("password_env", secret.PASSWORD_ENV))
        config = PollerConfig(**{k: v for k, v in cfg.items() if k in _CONFIG_KEYS})
        return cls(host, targets._unique(bmcs), creds, config,
                   name=str(cfg.get("name", "redfish")))

    def _emit(self, points: list[Point], rejected: list[Rejection]) -> None:
        with self._lock:
            self._queue.extend(points)
            self._rejected.extend(rejected)

    def take_points(self) -> tuple[list[Point], list[Rejection]]:
        """What the poller read since the last call (collect() maps these onto a Batch)."""
        with self._lock:
            points, rejected = list(self._queue), list(self._rejected)
            self._queue.clear()
            self._rejected.clear()
        return points, rejected

    def start(self) -> None:
        if self._thread is not None:
            return
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop, self._stop = loop, asyncio.Event()
            ready.set()
            try:
                loop.run_until_complete(self.poller.run(self._stop))
                loop.run_until_complete(self.poller.aclose())
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name=f"{self.name}-poller", daemon=True)
        self._thread.start()
        ready.wait()

    def collect(self) -> Batch:
        if self._thread is None:
            self.start()
        points, rejected = self.take_points()
        states = self.poller.states
        down = [s for s in states if s.reachable is False]
        if self._thread is not None and not self._thread.is_alive():
            self.status.up, self.status.reason = False, "the poller thread stopped"
        elif down and len(down) == len(states):
            shown = "; ".join(s.last_error for s in down[:3])
            self.status.up = False
            self.status.reason = f"no BMC answers ({len(down)}): {shown}"
        else:
            self.status.up, self.status.reason = True, ""
        return self._mapper.to_batch(points, rejected)

    def close(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout=10)
        self._thread = None
