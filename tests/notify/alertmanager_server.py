"""A real Alertmanager (Debian's `prometheus-alertmanager`) on a loopback port with a storage
directory of its own, started and stopped by tests: one route grouped by `node` to a receiver
that sends nothing, and clustering off (no gossip port)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from tests.loopback import Daemon, answers
from tests.notify.receivers.servers import free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

CONFIG = """route:
  receiver: blackhole
  group_by: [node]
  group_wait: 1h
  group_interval: 1h
  repeat_interval: 4h
receivers:
  - name: blackhole
"""


class AlertmanagerServer(Daemon):
    """`extra`: more of its configuration (inhibit_rules, say), appended to CONFIG."""

    def __init__(self, root: Path, extra: str = "") -> None:
        if ALERTMANAGER is None:
            raise RuntimeError("prometheus-alertmanager is not installed "
                               "(apt-get install prometheus-alertmanager)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = root / "alertmanager.yml"
        self.conf.write_text(CONFIG + extra)
        super().__init__(root, "alertmanager")

    def start(self, timeout_s: float = 30.0) -> None:
        assert ALERTMANAGER is not None
        self.launch([ALERTMANAGER, f"--config.file={self.conf}",
                     f"--storage.path={self.root / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                     "--log.level=warn"], answers(f"{self.url}/-/ready"), timeout_s)

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(f"{self.url}/api/v2{path}", params=params, timeout=10)
        r.raise_for_status()
        return r.json()

    def alerts(self, **params: Any) -> list[dict[str, Any]]:
        """Its alerts (every state unless `params` says otherwise)."""
        found: list[dict[str, Any]] = self.get("/alerts", **params)
        return found

    def groups(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/alerts/groups")
        return found

    def silence(self, matchers: dict[str, str], hours: float = 1.0) -> str:
        """A silence of equality matchers made through its API, as an operator would; its id."""
        now = time.time()
        body = {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True}
                             for k, v in matchers.items()],
                "startsAt": _rfc3339(now), "endsAt": _rfc3339(now + hours * 3600),
                "createdBy": "test", "comment": "maintenance"}
        r = httpx.post(f"{self.url}/api/v2/silences", json=body, timeout=10)
        r.raise_for_status()
        sid: str = r.json()["silenceID"]
        return sid


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"
