"""One pagination scheme for every list endpoint: `limit` (1 to MAX_LIMIT) and an opaque
`cursor`; an answer carries `next_cursor`, null on the last page.

A cursor is the position after the last item of a page: the listing's name, its ordering
(where the caller picks one) and the last item's sort key, as JSON in unpadded base64url after
an HMAC of it. Keyset rather than offset, so an item added or removed meanwhile neither
repeats nor skips the ones after it. The HMAC's key (service.api.cursor_key) is the fleet's,
kept in the shared state: a caller cannot make a cursor of its own (a forged sort key reaches
a store's query), only hand back one a shard gave. A cursor edited, cut short or from another
listing or ordering is refused, and so is a key out of a store's range; each answers 400
with the reason. The old `offset`
parameter is refused with a 400 that names its replacement, rather than being silently
ignored (which would hand the first page again)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request

from service.api import cursor_key
from service.api.bounded import in_range
from service.api.state import _running
from service.errors import BadRequest

MAX_LIMIT = 1000
_DIGEST = 16  # bytes of the HMAC-SHA256 kept
T = TypeVar("T")


class CursorNotValid(BadRequest):
    slug = "cursor-not-valid"
    title = "Pagination cursor not valid"


class OffsetRetired(BadRequest):
    slug = "offset-retired"
    title = "offset is replaced by cursor"


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, payload, hashlib.sha256).digest()[:_DIGEST]


def encode(listing: str, key: Sequence[Any], *, secret: bytes) -> str:
    payload = json.dumps([listing, list(key)], separators=(",", ":")).encode()
    raw = _mac(secret, payload) + payload
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode(listing: str, cursor: str, *, secret: bytes) -> list[Any]:
    """The sort key the cursor holds; CursorNotValid (400) when it is not one of `listing`'s
    signed with `secret`."""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_",
                               validate=True)
    except (binascii.Error, ValueError):
        raise CursorNotValid("the cursor is not one this service gave: not base64url") \
            from None
    digest, payload = raw[:_DIGEST], raw[_DIGEST:]
    if len(raw) <= _DIGEST or not hmac.compare_digest(_mac(secret, payload), digest):
        raise CursorNotValid("the cursor was altered or cut short: pass `next_cursor` "
                             "exactly as an answer gave it")
    try:
        found, key = json.loads(payload)
    except (ValueError, TypeError):
        raise CursorNotValid("the cursor is not one this service gave") from None
    if found != listing or not isinstance(key, list):
        raise CursorNotValid(f"the cursor belongs to another listing ({found!r}), not "
                             f"{listing!r}: start again without one")
    return key


def _fits(value: object, kind: type) -> bool:
    """Whether a cursor's key member is a `kind` a store's query takes: ints within 64 bits,
    finite floats (a shard never writes others; one that did would be a 500 in a query)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return kind in (int, float) and in_range(value)
    if isinstance(value, float):
        return kind is float and math.isfinite(value)
    return isinstance(value, kind)


@dataclass(frozen=True, slots=True)
class Page:
    limit: int
    cursor: str | None
    secret: bytes = field(repr=False)

    def after(self, listing: str, types: Sequence[type]) -> list[Any] | None:
        """The decoded sort key, its members checked against `types` (float takes an int
        too), or None on page one."""
        if self.cursor is None:
            return None
        key = decode(listing, self.cursor, secret=self.secret)
        if len(key) != len(types) or not all(
                _fits(v, t) for v, t in zip(key, types, strict=True)):
            raise CursorNotValid(f"the cursor does not fit {listing!r}: start again "
                                 "without one")
        return key

    def slice(self, listing: str, ordered: Sequence[T], key: Callable[[T], Sequence[Any]],
              start: int) -> tuple[list[T], str | None]:
        """`limit` items of `ordered` from `start`, and the cursor after them (None at the
        end)."""
        items = list(ordered[start: start + self.limit])
        more = start + self.limit < len(ordered)
        return items, (encode(listing, key(items[-1]), secret=self.secret) if more and items
                       else None)


def page_of(default: int) -> Callable[..., Page]:
    """The dependency that reads `limit` (defaulting to `default`) and `cursor`."""

    def page(request: Request,
             limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description=(
                 f"items per page, 1 to {MAX_LIMIT}"))] = default,
             cursor: Annotated[str | None, Query(description=(
                 "`next_cursor` of the previous page; none for the first"))] = None) -> Page:
        if "offset" in request.query_params:
            raise OffsetRetired("`offset` is no longer taken: page with `cursor`, passing "
                                "each answer's `next_cursor` until it is null")
        return Page(limit, cursor, secret(request))

    return page


def secret(request: Request) -> bytes:
    """The fleet's cursor key, read from the shared state on a service's first listing."""
    key: bytes | None = getattr(request.app.state, "gpuhealth_cursor_key", None)
    if key is None:
        key = cursor_key.load(_running(request).settings.storage.state_target)
        request.app.state.gpuhealth_cursor_key = key
    return key


PageDep = Annotated[Page, Depends(page_of(100))]
