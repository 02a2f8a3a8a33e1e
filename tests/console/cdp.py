"""A real headless Chromium (Debian's `chromium`) driven over the DevTools protocol: a small
synchronous client on websocket-client that sends commands, keeps every event, and collects
what a person would see as errors in the browser's console."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import websocket

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                       "google-chrome")) if p), None)


class CdpError(RuntimeError):
    pass


class Browser:
    """One Chromium process with one page. `errors` holds every console error, uncaught
    exception and error log entry seen so far, as (kind, text, url)."""

    def __init__(self, profile: Path, width: int = 1440, height: int = 1000) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        profile.mkdir(parents=True, exist_ok=True)
        self.log = (profile / "chromium.log").open("ab")
        # Port 0: Chromium picks a free one and names it in DevToolsActivePort.
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT)
        port = self._port(profile / "DevToolsActivePort")
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
                 if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.errors: list[tuple[str, str, str]] = []
        self.requests: list[str] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _port(self, active: Path, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}; see "
                                   f"{self.log.name}")
            if active.exists():
                first = active.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    return int(first)
            time.sleep(0.1)
        raise RuntimeError(f"chromium did not open its DevTools port within {timeout_s} s")

    # ---- protocol --------------------------------------------------------------------------
    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        me = self._id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            if "method" in msg:
                self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        self.events.append(msg)
        method, p = msg["method"], msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            self.errors.append(("console", text, ""))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text", "")
            self.errors.append(("exception", text, d.get("url", "")))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            e = p["entry"]
            self.errors.append((f"log:{e.get('source', '')}", e["text"], e.get("url", "")))
        elif method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])

    def pump(self, seconds: float = 0.2) -> None:
        """Take in the events that arrive within `seconds`."""
        self.ws.settimeout(seconds)
        try:
            while True:
                self._event_or_reply(json.loads(self.ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(30)

    def _event_or_reply(self, msg: dict[str, Any]) -> None:
        if "method" in msg:
            self._event(msg)

    # ---- page ------------------------------------------------------------------------------
    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError(f"{expression!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait_for(self, expression: str, what: str, timeout_s: float = 30.0) -> Any:
        """Poll a JavaScript expression until it is truthy; fail saying `what` never came."""
        return wait(lambda: self.eval(expression), what, timeout_s, self.pump)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


def wait(probe: Callable[[], Any], what: str, timeout_s: float = 30.0,
         idle: Callable[[float], None] | None = None) -> Any:
    """The first truthy result of `probe`, polled until `timeout_s`; an AssertionError naming
    `what` when none comes (a condition awaited, never a duration asserted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout_s} s")
        if idle is not None:
            idle(0.2)
        else:
            time.sleep(0.2)
