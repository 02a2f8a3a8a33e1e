"""BMC credentials, kept out of logs, reprs, exceptions and the API.

A password or session token lives in a `Secret`, whose repr and str are a mask; only the HTTP
client calls `reveal()`, to build a header. Credentials come from a JSON file (one default pair,
and optionally a pair per BMC) or from the environment; nothing that reads them ever quotes the
file's content in an error.

    {"username": "monitor", "password": "...",
     "bmcs": {"n017": {"username": "monitor", "password": "..."}}}
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, NoReturn

from collectors.compat import dataclass

log = logging.getLogger(__name__)

MASK = "[REDACTED]"
USER_ENV = "GPUHEALTH_BMC_USERNAME"
PASSWORD_ENV = "GPUHEALTH_BMC_PASSWORD"
MAX_FILE_BYTES = 1_000_000


class Secret:
    """A string that never shows itself: repr, str and format give a mask; not picklable."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret is not pickled")

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: Secret = field(repr=False)

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password={MASK!r})"


@dataclass(frozen=True, slots=True)
class CredentialStore:
    """The default pair and any per-BMC pairs (by the node name the BMC list gives)."""

    default: Credentials | None = None
    per_bmc: Mapping[str, Credentials] = field(default_factory=dict)

    def for_bmc(self, name: str) -> Credentials | None:
        return self.per_bmc.get(name, self.default)


def load(path: Path | None = None, env: Mapping[str, str] | None = None, *,
         user_env: str = USER_ENV, password_env: str = PASSWORD_ENV) -> CredentialStore:
    """The file's pairs, with the environment's pair (when both variables are set) as the
    default over the file's. ValueError says what is wrong, never what the file holds."""
    env = os.environ if env is None else env
    default: Credentials | None = None
    per_bmc: dict[str, Credentials] = {}
    if path is not None:
        data = _read(path)
        if "username" in data or "password" in data:
            default = _pair(data, f"{path}")
        bmcs = data.get("bmcs", {})
        if not isinstance(bmcs, Mapping):
            raise ValueError(f"{path}: 'bmcs' must map a node name to its credentials")
        for name, pair in bmcs.items():
            if not isinstance(pair, Mapping):
                raise ValueError(f"{path}: bmcs.{str(name)[:80]} must be an object")
            per_bmc[str(name)] = _pair(pair, f"{path}: bmcs.{str(name)[:80]}")
    user, password = env.get(user_env), env.get(password_env)
    if user and password:
        default = Credentials(user, Secret(password))
    elif user or password:
        raise ValueError(f"set both {user_env} and {password_env}, or neither")
    return CredentialStore(default, per_bmc)


def _read(path: Path) -> dict[str, Any]:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("%s: readable by others than its owner (chmod 600 it)", path)
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        # json's message can quote the document: say only that it is not JSON.
        raise ValueError(f"{path}: not a JSON object") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def _pair(data: Mapping[str, Any], where: str) -> Credentials:
    user, password = data.get("username"), data.get("password")
    if not isinstance(user, str) or not user or not isinstance(password, str) or not password:
        raise ValueError(f"{where}: needs a non-empty string 'username' and 'password'")
    return Credentials(user, Secret(password))
