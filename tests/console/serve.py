"""What the console tests share: the service on a loopback port (uvicorn in a thread), and a
few steps of driving the page in Chromium."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from service.api.state import Running
from tests.console.cdp import Browser, wait


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    url: str
    st: Running
    tokens: dict[str, str]
    influx: bool = False

    def get(self, path: str) -> Any:
        r = httpx.get(self.url + path, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The app on a free loopback port until the block ends; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait(lambda: server.started, "the service starting")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def unexpected(b: Browser) -> list[tuple[str, str, str]]:
    """Errors but those the console is built to meet: a history endpoint's 501 where the
    store keeps no such history, a node's diagnostics' 503 where they are off (the page says
    so instead of drawing)."""
    return [e for e in b.errors
            if not (e[0] == "log:network" and "501" in e[1] and e[2].split("?")[0]
                    .endswith(("/risk", "/metrics")))
            and not (e[0] == "log:network" and "503" in e[1] and e[2].split("?")[0]
                     .endswith("/diagnostics"))]


def open_page(b: Browser, url: str, ready: str, what: str) -> None:
    b.goto(url)
    b.wait_for(f"document.readyState === 'complete' && !!({ready})", what)


def set_token(b: Browser, token: str) -> None:
    b.eval(f"(() => {{ const t = document.querySelector('#token'); t.value = {token!r};"
           " t.dispatchEvent(new Event('change')); })()")


def screenshot_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """Where a module's screenshots go: $GPUHEALTH_CONSOLE_SCREENSHOTS/<name> when set (to keep
    them, e.g. for docs/screenshots), else a temporary directory."""
    kept = os.environ.get("GPUHEALTH_CONSOLE_SCREENSHOTS")
    where = (Path(kept) if kept else factory.mktemp("console-screenshots")) / name
    where.mkdir(parents=True, exist_ok=True)
    return where


def browsing(factory: pytest.TempPathFactory, **size: int) -> Iterator[Browser]:
    """A headless Chromium for a module's tests, closed after them."""
    b = Browser(factory.mktemp("chromium"), **size)
    try:
        yield b
    finally:
        b.close()
