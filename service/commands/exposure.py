"""Safe by default: a service that listens beyond this machine with no write token lets anyone
who can reach it write telemetry (and so raise pages and drain requests). `serve` refuses to
start that way unless told it is intended (`--insecure` or `service.insecure`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from pydantic import SecretStr


def loopback(host: str) -> bool:
    """Whether `host` (a listen address) is reachable only from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def exposure_problem(host: str, write_tokens: Sequence[SecretStr], insecure: bool) -> str | None:
    """Why the service must not start, or None."""
    if insecure or write_tokens or loopback(host):
        return None
    return (f"listening on {host} with no write token lets anyone who reaches it write "
            "telemetry, raise pages and request drains: set ingest.tokens (agents send one), "
            "listen on 127.0.0.1, or pass --insecure (service.insecure: true) if this is meant")
