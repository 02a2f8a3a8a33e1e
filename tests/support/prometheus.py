"""A real Prometheus (Debian's `prometheus`) on a loopback port with a storage directory of its
own, scraping given targets every second and evaluating given rule files every second."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import httpx

from tests.loopback import Daemon, answers

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "dashboards" / "prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer(Daemon):
    def __init__(self, root: Path, targets: list[str], rule_files: list[Path],
                 job: str = "gpuhealth") -> None:
        if PROMETHEUS is None:
            raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = root / "prometheus.yml"
        rules = "".join(f"\n  - {p}" for p in rule_files)
        quoted = ", ".join(f"'{t}'" for t in targets)
        self.conf.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:{rules}
scrape_configs:
  - job_name: {job}
    static_configs:
      - targets: [{quoted}]
""")
        super().__init__(root, "prometheus")

    def start(self, timeout_s: float = 60.0) -> None:
        assert PROMETHEUS is not None
        self.launch([PROMETHEUS, f"--config.file={self.conf}",
                     f"--web.listen-address=127.0.0.1:{self.port}",
                     f"--storage.tsdb.path={self.root / 'data'}", "--log.level=warn"],
                    answers(f"{self.url}/-/ready"), timeout_s)

    def api(self, path: str, **params: str) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector: [{'metric': {...}, 'value': [ts, 'v']}, ...]."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, what: str, probe: Any, timeout_s: float = 60.0) -> Any:
        """Poll `probe()` until it returns something truthy; the deadline is generous (it
        bounds a hang, it measures nothing)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = probe()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout_s} s; see "
                                     f"{self.root / 'prometheus.log'}")
            time.sleep(0.2)
