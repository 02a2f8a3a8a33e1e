"""`gpuhealth serve` as a real subprocess on loopback, with a settings file written here and,
optionally, a lower open-file limit (soft and hard): for what only the real server shows, such
as slow clients, connection limits and the proxy headers uvicorn honours."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from tests.collectors.agent.relay_service import free_port
from tests.loopback import Daemon, answers

MAIN = "import sys; from service.commands.cli import main; sys.exit(main())"


class Served:
    def __init__(self, root: Path, settings: dict[str, Any] | None = None,
                 nofile: int | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg: dict[str, Any] = {"storage": {"data_dir": str(root / "var")},
                               "detectors": {"model": {"path": "none"}}}
        for section, values in (settings or {}).items():
            cfg[section] = {**cfg.get(section, {}), **values}
        cfg["service"] = {**cfg.get("service", {}), "host": "127.0.0.1", "port": self.port}
        self.config = root / "gpuhealth.yaml"
        self.config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        limit = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, "
                 f"({nofile}, {nofile})); ") if nofile else ""
        self.argv = [sys.executable, "-c", limit + MAIN, "--log-level", "WARNING", "serve",
                     "--config", str(self.config)]
        self.daemon = Daemon(root, "gpuhealth")

    def __enter__(self) -> Served:
        self.daemon.launch(self.argv, answers(f"{self.url}/healthz"), timeout_s=90)
        return self

    def __exit__(self, *_: object) -> None:
        self.daemon.stop()

    def log(self) -> str:
        return (self.root / "gpuhealth.log").read_text(errors="replace")
