"""Running ipmitool against one BMC: in band (the host's own BMC through /dev/ipmi0, `-I open`)
or over the LAN (`-I lanplus -H host -U user`, IPMI v2.0 RMCP+).

The password never reaches a command line (every user of the machine reads argv in
/proc/<pid>/cmdline) nor a log: it is either in a file (`-f passfile`, ipmitool reads its first
line) or in the child's environment only (`-E`: ipmitool reads IPMI_PASSWORD), copied from the
variable the settings name. The BMC host name is checked against the name grammar ingest holds
every host to (collectors/frames.py name_problem) before it reaches argv, so it is never read
as an option. Commands run from an argv list, never a shell, through collectors/process.py (a
timeout after which the whole process group is killed: a hung BMC session would otherwise hold
the pipes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collectors.frames import name_problem

INTERFACES = ("lanplus", "lan")
DEFAULT_PASSWORD_ENV = "IPMI_PASSWORD"
_USER = re.compile(r"[A-Za-z0-9_.@][A-Za-z0-9_.@-]{0,31}")  # IPMI user names are <= 16 bytes
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Target:
    """Where ipmitool reads: `bmc` None for in band, else a BMC on the LAN with its user and
    where its password comes from (`password_file`, else the environment variable
    `password_env`)."""

    bmc: str | None = None
    user: str = ""
    port: int = 623
    interface: str = "lanplus"
    cipher: int | None = None  # -C: the cipher suite; 3 and 17 are the common ones
    password_env: str = DEFAULT_PASSWORD_ENV
    password_file: Path | None = None
    binary: str = "ipmitool"

    def __post_init__(self) -> None:
        why = self.problem()
        if why is not None:
            raise ValueError(why)

    def problem(self) -> str | None:
        if self.bmc is None:
            return None
        why = name_problem(self.bmc, "BMC host")
        if why is not None:
            return why
        if _USER.fullmatch(self.user) is None:
            return f"BMC user {self.user[:40]!r} is empty or holds characters other than " \
                   "letters, digits, '.', '@', '_' and '-'"
        if self.interface not in INTERFACES:
            return f"interface {self.interface!r} is not one of {', '.join(INTERFACES)}"
        if not 0 < self.port < 65536:
            return f"port {self.port} is not a UDP port"
        if self.cipher is not None and not 0 <= self.cipher <= 17:
            return f"cipher suite {self.cipher} is not 0-17"
        if self.password_file is None and _ENV_NAME.fullmatch(self.password_env) is None:
            return f"password_env {self.password_env[:40]!r} is not an environment variable name"
        return None

    @property
    def label(self) -> str:
        """How messages name the BMC (no user, no password)."""
        return "the in-band BMC" if self.bmc is None else f"BMC {self.bmc}"

    def argv(self, *command: str) -> list[str]:
        if self.bmc is None:
            return [self.binary, "-I", "open", *command]
        out = [self.binary, "-I", self.interface, "-H", self.bmc, "-p", str(self.port),
               "-U", self.user]
        if self.cipher is not None:
            out += ["-C", str(self.cipher)]
        out += ["-f", str(self.password_file)] if self.password_file is not None else ["-E"]
        return [*out, *command]

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The child's environment: ours, with IPMI_PASSWORD taken from `password_env`; None
        (inherit) in band or with a password file. KeyError when the variable is unset."""
        if self.bmc is None or self.password_file is not None:
            return None
        src = os.environ if environ is None else environ
        if self.password_env not in src:
            raise KeyError(f"{self.password_env} is not set: no password for {self.label}")
        return {**src, DEFAULT_PASSWORD_ENV: src[self.password_env]}


def redact(text: str, secret: str | None) -> str:
    """`text` with the password cut out, should a BMC or tool ever echo it back."""
    return text.replace(secret, "***") if secret else text
