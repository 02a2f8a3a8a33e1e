"""A lightweight loopback Redfish service answering as many BMCs, one port each, from one
mockup tree held in memory (sushy-static per BMC would be a process each): GET of every
resource, Basic auth or a Redfish session (POST /redfish/v1/SessionService/Sessions, then
X-Auth-Token; DELETE logs out), and BMCs that accept a connection and never answer (`hung`).

Run as a process (the benchmark: its CPU is then not the poller's):

    python -m tests.collectors.redfish.emulator MOCKUP --bmcs 1250 --hung 1 --ports-file F
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import resource
import secrets
import threading
from pathlib import Path

SESSIONS = "/redfish/v1/SessionService/Sessions"


def load_tree(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for f in root.rglob("index.json"):
        rel = f.parent.relative_to(root).as_posix()
        path = "/redfish/v1" + ("" if rel == "." else "/" + rel)
        out[path] = json.dumps(json.loads(f.read_text(encoding="utf-8"))).encode()
    return out


class Emulator:
    def __init__(self, resources: dict[str, bytes], *, user: str = "", password: str = "",
                 hung: frozenset[int] = frozenset()) -> None:
        self.resources = resources
        self.user, self.password = user, password
        self.hung = hung  # indexes of BMCs that never answer
        self.tokens: set[str] = set()
        self.requests = 0
        self.servers: list[asyncio.Server] = []

    async def start(self, bmcs: int) -> list[int]:
        for i in range(bmcs):
            handler = self._hang if i in self.hung else self._serve
            self.servers.append(await asyncio.start_server(handler, "127.0.0.1", 0,
                                                           backlog=64))
        return [s.sockets[0].getsockname()[1] for s in self.servers]

    async def _hang(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            writer.close()

    def _authorized(self, headers: dict[str, str]) -> bool:
        if not self.user:
            return True
        if headers.get("x-auth-token") in self.tokens:
            return True
        basic = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return headers.get("authorization") == f"Basic {basic}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                writer.write(self._answer(method, path, headers, body))
                await writer.drain()
        except (ConnectionError, ValueError, asyncio.IncompleteReadError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        extra = ""
        if method == "POST" and path == SESSIONS:
            creds = json.loads(body or b"{}")
            if creds.get("UserName") != self.user or creds.get("Password") != self.password:
                return _reply(401, b"")
            token = secrets.token_hex(16)
            self.tokens.add(token)
            extra = f"X-Auth-Token: {token}\r\nLocation: {SESSIONS}/{token[:8]}\r\n"
            return _reply(201, b"{}", extra)
        if not self._authorized(headers):
            return _reply(401, b"")
        if method == "DELETE":
            return _reply(204, b"")
        data = self.resources.get(path.split("?", 1)[0].rstrip("/") or "/redfish/v1")
        return _reply(200, data) if data is not None else _reply(404, b"")


def _reply(status: int, body: bytes, extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n")
    return head.encode() + body


class ThreadedEmulator:
    """The emulator on a loop of its own in a thread (tests)."""

    def __init__(self, emulator: Emulator, bmcs: int) -> None:
        self.emulator = emulator
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.ports: list[int] = []

        async def main() -> None:
            self.ports = await emulator.start(bmcs)
            ready.set()

        self.thread = threading.Thread(target=self._run, args=(main,), daemon=True)
        self.thread.start()
        ready.wait(30)

    def _run(self, main: object) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(main())  # type: ignore[operator]
        self.loop.run_forever()

    def stop(self) -> None:
        async def shut() -> None:
            for server in self.emulator.servers:
                server.close()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mockup", type=Path)
    p.add_argument("--bmcs", type=int, default=1250)
    p.add_argument("--hung", type=int, default=1, help="this many BMCs never answer")
    p.add_argument("--user", default="")
    p.add_argument("--password", default="")
    p.add_argument("--ports-file", type=Path, required=True)
    args = p.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    emu = Emulator(load_tree(args.mockup), user=args.user, password=args.password,
                   hung=frozenset(range(args.hung)))

    async def run() -> None:
        ports = await emu.start(args.bmcs)
        args.ports_file.write_text("\n".join(map(str, ports)) + "\n")
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
