"""The BMC list: which node each BMC belongs to and where the BMC answers.

Each entry pairs the node's host name (what its points are tagged with, checked against the
name grammar of collectors.frames before use: it reaches URLs, command lines and remediation)
with the BMC's address: `host`, `host:port`, `[v6]:port`, or a URL `https://host:port`
(default https, port 443). As settings: a list of "node=address" strings or
{"name": node, "address": address} objects; as a file: one "node address" pair a line, `#`
comments.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from collectors.compat import dataclass
from collectors.frames import name_problem

MAX_BMCS = 100_000


@dataclass(frozen=True, slots=True)
class Bmc:
    name: str  # the node's host name
    scheme: str  # "https" or "http"
    host: str  # BMC host name or IP address (IPv6 without brackets)
    port: int

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}"


def parse_address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an address; ValueError says why it is refused."""
    text = address.strip()
    if not text or len(text) > 300 or any(c.isspace() for c in text):
        raise ValueError(f"BMC address {text[:80]!r} is empty, too long or holds whitespace")
    url = urlsplit(text if "://" in text else f"https://{text}")
    if url.scheme not in ("https", "http"):
        raise ValueError(f"BMC address {text[:80]!r}: scheme must be https or http")
    if url.username or url.password:
        raise ValueError("a BMC address must not hold credentials (use the credentials file "
                         "or environment)")
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ValueError(f"BMC address {text[:80]!r}: give only the scheme, host and port")
    host = url.hostname or ""
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"BMC address {text[:80]!r}: bad port") from None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        why = name_problem(host, "BMC host")
        if why is not None:
            raise ValueError(why) from None
    return url.scheme, host, port


def bmc(name: str, address: str) -> Bmc:
    why = name_problem(name, "node name")
    if why is not None:
        raise ValueError(why)
    return Bmc(name, *parse_address(address))


def from_settings(entries: Iterable[Any]) -> list[Bmc]:
    out: list[Bmc] = []
    for i, e in enumerate(entries):
        if isinstance(e, str) and "=" in e:
            name, _, address = e.partition("=")
        elif isinstance(e, Mapping) and isinstance(e.get("name"), str) \
                and isinstance(e.get("address"), str):
            name, address = e["name"], e["address"]
        else:
            raise ValueError(f"bmcs[{i}]: give \"node=address\" or {{name, address}}")
        try:
            out.append(bmc(name.strip(), address))
        except ValueError as exc:
            raise ValueError(f"bmcs[{i}]: {exc}") from None
    return _unique(out)


def from_file(path: Path) -> list[Bmc]:
    out: list[Bmc] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{n}: give \"node address\"")
        try:
            out.append(bmc(parts[0], parts[1]))
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return _unique(out)


def _unique(bmcs: list[Bmc]) -> list[Bmc]:
    if len(bmcs) > MAX_BMCS:
        raise ValueError(f"{len(bmcs)} BMCs: at most {MAX_BMCS} per poller")
    seen: set[str] = set()
    for b in bmcs:
        if b.name in seen:
            raise ValueError(f"node {b.name!r} is listed twice")
        seen.add(b.name)
    return bmcs
