"""The DMTF public-rackmount1 mockup served by a real Redfish emulator, sushy-static (from the
sushy-tools package), from a copy the test may change between reads."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import Daemon, answers

MOCKUP = (Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "redfish"
          / "public-rackmount1")
SUSHY = Path(sys.executable).parent / "sushy-static"
NEEDS = pytest.mark.skipif(
    not MOCKUP.is_dir() or not SUSHY.is_file(),
    reason="needs ../shared/reference/redfish/public-rackmount1 beside the repo and "
           "sushy-static (pip install -r requirements-dev.txt)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SushyStatic(Daemon):
    """sushy-static on a loopback port, serving `tree` (a copy of the mockup). It prints each
    request's headers to its log: what the BMC side saw."""

    def __init__(self, root: Path) -> None:
        self.tree = root / "mockup"
        shutil.copytree(MOCKUP, self.tree)
        for f in self.tree.rglob("*"):  # the shared copy is read-only
            f.chmod(0o755 if f.is_dir() else 0o644)
        self.port = free_port()
        self.scheme = "http"
        super().__init__(root, "sushy-static")

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self, cert: Path | None = None, key: Path | None = None) -> None:
        argv = [str(SUSHY), "--interface", "127.0.0.1", "--port", str(self.port),
                "--mockup-files", str(self.tree)]
        if cert and key:
            argv += ["--ssl-certificate", str(cert), "--ssl-key", str(key)]
            self.scheme = "https"
            ready: Callable[[], bool] = lambda: _tls_up(self.port)  # noqa: E731
        else:
            ready = answers(f"{self.url}/redfish/v1")
        self.launch(argv, ready, 30)

    def log(self) -> str:
        return (self.root / "sushy-static.log").read_text(errors="replace")

    def edit(self, resource: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the resource at `resource` (a path under /redfish/v1) in the served copy."""
        f = self.tree.joinpath(*resource.split("/")) / "index.json"
        data = json.loads(f.read_text())
        change(data)
        f.write_text(json.dumps(data, indent=1))


def _tls_up(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
