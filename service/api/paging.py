"""One pagination scheme for every list endpoint: `limit` (1 to MAX_LIMIT) and an opaque
`cursor`; an answer carries `next_cursor`, null on the last page.

A cursor is the position after the last item of a page: the listing's name, its ordering
(where the caller picks one) and the last item's sort key, as JSON in unpadded base64url with
a short digest. Keyset rather than offset, so an item added or removed meanwhile neither
repeats nor skips the ones after it. The digest catches a cursor edited or cut short (it is
not a secret: whoever holds a cursor may read the listing anyway); a cursor from another
listing or ordering is refused too. Both answer 400 with the reason. The old `offset`
parameter is refused with a 400 that names its replacement, rather than being silently
ignored (which would hand the first page again)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request

from service.errors import BadRequest

MAX_LIMIT = 1000
_DIGEST = 8  # bytes of sha256 kept
T = TypeVar("T")


class CursorNotValid(BadRequest):
    slug = "cursor-not-valid"
    title = "Pagination cursor not valid"


class OffsetRetired(BadRequest):
    slug = "offset-retired"
    title = "offset is replaced by cursor"


def encode(listing: str, key: Sequence[Any]) -> str:
    payload = json.dumps([listing, list(key)], separators=(",", ":")).encode()
    raw = hashlib.sha256(payload).digest()[:_DIGEST] + payload
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode(listing: str, cursor: str) -> list[Any]:
    """The sort key the cursor holds; CursorNotValid (400) when it is not one of `listing`'s."""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_",
                               validate=True)
    except (binascii.Error, ValueError):
        raise CursorNotValid("the cursor is not one this service gave: not base64url") \
            from None
    digest, payload = raw[:_DIGEST], raw[_DIGEST:]
    if len(raw) <= _DIGEST or hashlib.sha256(payload).digest()[:_DIGEST] != digest:
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
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)


@dataclass(frozen=True, slots=True)
class Page:
    limit: int
    cursor: str | None

    def after(self, listing: str, types: Sequence[type]) -> list[Any] | None:
        """The decoded sort key, its members checked against `types` (float takes an int
        too), or None on page one."""
        if self.cursor is None:
            return None
        key = decode(listing, self.cursor)
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
        return items, encode(listing, key(items[-1])) if more and items else None


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
        return Page(limit, cursor)

    return page


PageDep = Annotated[Page, Depends(page_of(100))]
