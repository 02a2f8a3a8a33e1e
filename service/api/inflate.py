"""Bounded gzip inflation of a write body (collectors.gzip_body), its refusals as the service
answers them: 413 past a bound, 400 when it is not gzip. The caller runs `inflate` off the
event loop; `inflate_small` is the bounded work small enough to do on it."""

from __future__ import annotations

from collectors.gzip_body import (
    MAX_MEMBERS,
    MAX_RATIO,
    RATIO_FLOOR,
    GzipNotValid,
    GzipTooLarge,
    Inflated,
)
from collectors.gzip_body import inflate as _inflate
from service.errors import BadRequest, PayloadTooLarge

__all__ = ["MAX_MEMBERS", "MAX_RATIO", "RATIO_FLOOR", "Inflated", "inflate", "inflate_small"]


def inflate(body: bytes, *, limit: int, max_members: int = MAX_MEMBERS,
            max_ratio: int = MAX_RATIO, ratio_floor: int = RATIO_FLOOR) -> Inflated:
    """Inflate a gzip body to at most `limit` bytes and `max_ratio` times its size (or
    `ratio_floor`, whichever is larger). PayloadTooLarge (413) past those, or past
    `max_members`; refused (400) when it is not gzip."""
    try:
        return _inflate(body, limit=limit, max_members=max_members, max_ratio=max_ratio,
                        ratio_floor=ratio_floor)
    except GzipTooLarge as exc:
        raise PayloadTooLarge(str(exc)) from None
    except GzipNotValid as exc:
        raise BadRequest(str(exc)) from None


def inflate_small(body: bytes, *, cap: int, max_members: int = 4) -> Inflated | None:
    """The body inflated when it inflates to at most `cap` bytes in at most `max_members`
    members: small enough work to do on the event loop (bounded by `cap`, not by what the
    body says). None otherwise, or when it is not gzip: the caller then inflates it in a
    worker thread with `inflate`, which answers those cases as it always has."""
    if len(body) > cap:
        return None
    try:
        return inflate(body, limit=cap, max_members=max_members)
    except (BadRequest, PayloadTooLarge):
        return None
