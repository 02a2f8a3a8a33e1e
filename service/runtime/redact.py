"""Keep credentials out of the logs: a filter that redacts them from every record a handler
emits, and `install()`, which puts it on the root logger's handlers (gpuhealth's
configure_logging calls it).

Redacted: `Bearer <token>`, API tokens (`ghk_<id>_<secret>`: the id, which is not secret,
stays), `Authorization` header values, and `token=`, `password=`, `secret=` (also in
`access_token=` and the like, and as JSON `"token": "..."`) and InfluxDB's `p=` query
parameter. uvicorn's access log prints the query string, so a v1 write's `?p=<token>` would
otherwise land there.

On handlers, not loggers: a logger's filters do not see records propagated from its children.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

MASK = "[REDACTED]"

_RULES: list[tuple[re.Pattern[str], str]] = [
    # Header values first, as they may hold any scheme (Basic, Token, Bearer): the scheme word
    # and the credential after it.
    (re.compile(r"""(authorization["']?\s*[:=]\s*["']?)(?:[A-Za-z]+ +)?[^\s"',;}]+""",
                re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(r"(bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(r"(ghk_[0-9A-Za-z]+_)[A-Za-z0-9_-]+"), rf"\1{MASK}"),
    # Anchored at a name's start so a long word costs linear time, not quadratic.
    (re.compile(r"""((?<![\w-])[\w-]*?(?:token|password|passwd|secret)["']?\s*[=:]\s*["']?)"""
                r"""[^&\s"',;}]+""", re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(r"([?&]p=)[^&\s\"']+"), rf"\1{MASK}"),
]


def redact(text: str) -> str:
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text


def _arg(value: object) -> object:
    """An argument, redacted if its text held a secret; untouched otherwise, so that `%d` and
    formatters that read the arguments (uvicorn's access log) still work."""
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    text = str(value)
    clean = redact(text)
    return value if clean == text else clean


class RedactingFilter(logging.Filter):
    """Redacts a record in place and lets it through. Where a secret lies in an argument alone
    the record keeps its template and arguments, each cleaned; otherwise (a secret in the
    template, or split across template and argument: "token=%s") it becomes the formatted,
    redacted message with no arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            full = record.getMessage()
        except Exception:  # a broken format: logging reports it; nothing of ours to add
            return True
        clean = redact(full)
        if clean != full:
            self._clean_message(record, clean)
        if record.exc_info and not record.exc_text:
            # Formatter.format uses exc_text when set: format the traceback here, redacted.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True

    @staticmethod
    def _clean_message(record: logging.LogRecord, clean: str) -> None:
        args: Any = record.args
        if isinstance(record.msg, str) and redact(record.msg) == record.msg and args:
            if isinstance(args, Mapping):
                record.args = {k: _arg(v) for k, v in args.items()}
            else:
                record.args = tuple(_arg(v) for v in args)
            try:
                out: str | None = record.getMessage()
            except Exception:
                out = None
            if out is not None and redact(out) == out:
                return
        record.msg, record.args = clean, None


def install(logger: logging.Logger | None = None) -> RedactingFilter:
    """Put one RedactingFilter on each handler of `logger` (the root logger by default); safe
    to call again. Handlers added later need their own call."""
    target = logger or logging.getLogger()
    found = [f for h in target.handlers for f in h.filters if isinstance(f, RedactingFilter)]
    flt = found[0] if found else RedactingFilter()
    for h in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(flt)
    return flt
