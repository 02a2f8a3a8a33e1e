"""Who a request acts as, and the permission levels a token grants: a leaf module, so the
stores that key their state by principal (rate limits, idempotency keys) never import the
authentication that builds them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Scope(IntEnum):
    """Ordered: a higher scope includes the lower ones."""

    READ = 1
    OPERATE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str | Scope) -> Scope:
        if isinstance(name, Scope):
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
    scope: Scope

    def allows(self, scope: Scope) -> bool:
        return self.scope >= scope


# Reads without a token, where settings allow them; never passes a scope above read.
ANONYMOUS = Principal("", "anonymous", Scope.READ)
