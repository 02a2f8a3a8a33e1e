"""A real InfluxDB 1.x server (Debian's `influxd`) on loopback ports with a data directory of
its own, started and stopped by tests. Stop and start keep the data, which is what the fault
tests need: InfluxDB goes away mid-replay and comes back with everything it had."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import httpx

from tests.loopback import Daemon, answers

INFLUXD = shutil.which("influxd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class InfluxServer(Daemon):
    def __init__(self, root: Path) -> None:
        if INFLUXD is None:
            raise RuntimeError("influxd is not installed (apt-get install influxdb)")
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = root / "influxdb.conf"
        root.mkdir(parents=True, exist_ok=True)
        conf.write_text(f"""reporting-disabled = true
bind-address = "127.0.0.1:{free_port()}"
[meta]
  dir = "{root / 'meta'}"
[data]
  dir = "{root / 'data'}"
  wal-dir = "{root / 'wal'}"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:{self.port}"
  log-enabled = false
  max-body-size = 0
[continuous_queries]
  enabled = true
  log-enabled = false
  run-interval = "1s"
[monitor]
  store-enabled = false
[logging]
  level = "warn"
""")
        self.conf = conf
        super().__init__(root, "influxd")

    def start(self, timeout_s: float = 30.0) -> None:
        assert INFLUXD is not None
        self.launch([INFLUXD, "-config", str(self.conf)], answers(f"{self.url}/ping", 204),
                    timeout_s)

    def query(self, q: str, db: str = "", epoch: str = "") -> list[dict[str, object]]:
        """Raw InfluxQL for test assertions: the `series` of the first statement."""
        data = {"q": q, "db": db, **({"epoch": epoch} if epoch else {})}
        r = httpx.post(f"{self.url}/query", data=data, timeout=30)
        r.raise_for_status()
        res = r.json()["results"][0]
        if "error" in res:
            raise RuntimeError(f"{q}: {res['error']}")
        series: list[dict[str, object]] = res.get("series", [])
        return series

    def count(self, measurement: str, field: str, db: str, where: str = "") -> int:
        cond = f" WHERE {where}" if where else ""
        s = self.query(f'SELECT count("{field}") FROM "{measurement}"{cond}', db)
        if not s:
            return 0
        values = s[0]["values"]
        assert isinstance(values, list)
        return int(values[0][1])
