"""Who a request acts as, and the permission levels a token grants: a leaf module, so the
stores that key their state by principal (rate limits, idempotency keys) never import the
authentication that builds them.

A token's permission travels as its "scope" (the OAuth 2.0 word, RFC 6749 section 3.3, which
the bearer challenge of RFC 6750 repeats): the token field, the CLI's `--scope` and the
`insufficient_scope` error keep that name. It is a different thing from a metric's scope
(`collectors.catalog.Scope`: GPU, NVLink link, InfiniBand port, node)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Permission(IntEnum):
    """Ordered: a higher permission includes the lower ones."""

    READ = 1
    OPERATE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str | Permission) -> Permission:
        if isinstance(name, Permission):
            return name
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown scope {name!r}: choose from "
                             f"{', '.join(str(s) for s in cls)}") from None

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as."""

    token_id: str
    name: str
    scope: Permission  # the token's scope (see the module docstring)

    def allows(self, permission: Permission) -> bool:
        return self.scope >= permission


# Reads without a token, where settings allow them; never passes a permission above read.
ANONYMOUS = Principal("", "anonymous", Permission.READ)
