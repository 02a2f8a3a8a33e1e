"""Running ipmitool or freeipmi against one BMC: in band (the host's own BMC through /dev/ipmi0,
`ipmitool -I open`, freeipmi's `-D OPENIPMI`: the same kernel driver) or over the LAN (`-I lanplus
-H host -U user`, freeipmi `-D LAN_2_0 -h host:port -u user`, IPMI v2.0 RMCP+).

The password never reaches a command line (every user of the machine reads argv in
/proc/<pid>/cmdline) nor a log. For ipmitool it is either in a file (`-f passfile`, ipmitool
reads its first line) or in the child's environment only (`-E`: ipmitool reads IPMI_PASSWORD),
copied from the variable the settings name. freeipmi reads neither: it takes the password from
its configuration file (freeipmi.conf(5), `--config-file`: "It can also be used to hide
usernames, passwords ... from the ps(1) command"), so the collector writes one, mode 0600 in a
private directory, for the length of a read (`freeipmi_config`). The BMC host name is checked
against the name grammar ingest holds every host to (collectors/frames.py name_problem) before
it reaches argv, so it is never read as an option. Commands run from an argv list, never a
shell, through collectors/process.py (a timeout after which the whole process group is killed:
a hung BMC session would otherwise hold the pipes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from collectors.compat import dataclass
from collectors.frames import name_problem

INTERFACES = ("lanplus", "lan")
TOOLS = ("ipmitool", "freeipmi")
DEFAULT_PASSWORD_ENV = "IPMI_PASSWORD"
# freeipmi's -D driver for each interface: LAN_2_0 is IPMI v2.0 RMCP+ (ipmitool's lanplus).
_FREEIPMI_DRIVER = {"lanplus": "LAN_2_0", "lan": "LAN"}
_WORKAROUND = re.compile(r"[a-z0-9]{1,32}")  # freeipmi -W flag names: opensesspriv, intel20, ...
# The config file's grammar (freeipmi.conf(5)): whitespace separates arguments, '#' starts a
# comment, a backslash continues a line. '#' is escaped with a backslash (checked against the
# real tool); a password with whitespace, a quote or a backslash is refused, not guessed at.
_CONF_UNSAFE = re.compile(r'[\s"\\]')
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
    binary: str = "ipmitool"  # the ipmitool program; freeipmi's are ipmi-sensors and ipmi-sel
    tool: str = "ipmitool"  # or "freeipmi"
    workarounds: tuple[str, ...] = ()  # freeipmi -W flags, for BMCs that need them

    def __post_init__(self) -> None:
        why = self.problem()
        if why is not None:
            raise ValueError(why)

    def problem(self) -> str | None:
        if self.tool not in TOOLS:
            return f"tool {self.tool!r} is not one of {', '.join(TOOLS)}"
        bad = [w for w in self.workarounds if _WORKAROUND.fullmatch(w) is None]
        if bad:
            return f"workaround {bad[0][:40]!r} is not a freeipmi -W flag name"
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

    def freeipmi_argv(self, program: str, *args: str, config: Path | None,
                      cache: Path) -> list[str]:
        """`program` (ipmi-sensors, ipmi-sel) with the connection options; `config` is the
        file holding the password (LAN only), `cache` the SDR cache directory (freeipmi's
        default is the home directory, which an agent's user may not have)."""
        out = [program]
        if self.bmc is None:
            out += ["-D", "OPENIPMI"]
        else:
            if config is None:
                raise ValueError("freeipmi over the LAN needs the config file with the password")
            out += ["-D", _FREEIPMI_DRIVER[self.interface], "-h", f"{self.bmc}:{self.port}",
                    "-u", self.user, "--config-file", str(config)]
            if self.cipher is not None:
                out += ["-I", str(self.cipher)]
        if self.workarounds:
            out += ["-W", ",".join(self.workarounds)]
        return [*out, "--sdr-cache-directory", str(cache), "--quiet-cache",
                "--sdr-cache-recreate", *args]

    def password(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The LAN password (the first line of `password_file`, else the `password_env`
        variable); None in band. KeyError when the variable is unset, OSError when the file
        cannot be read."""
        if self.bmc is None:
            return None
        if self.password_file is not None:
            lines = self.password_file.read_text(encoding="utf-8").splitlines()
            return lines[0] if lines else ""
        src = os.environ if environ is None else environ
        if self.password_env not in src:
            raise KeyError(f"{self.password_env} is not set: no password for {self.label}")
        return src[self.password_env]

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


def freeipmi_config(password: str) -> str:
    """freeipmi.conf text carrying `password`; ValueError (never naming it) when the file's
    grammar cannot hold it."""
    if not password:
        raise ValueError("the BMC password is empty")
    if _CONF_UNSAFE.search(password):
        raise ValueError("the BMC password holds whitespace, a quote or a backslash, which "
                         "freeipmi's config file cannot carry safely; use ipmitool (tool: "
                         "ipmitool) for this BMC")
    return "password " + password.replace("#", "\\#") + "\n"
