"""Bounded gzip inflation of a write body: in output size, compression ratio and members. The
service's write routes and the rack relay read bodies from the wire with it (each maps its
refusals to its own answer: 413 past a bound, 400 when it is not gzip).

A body may hold several concatenated gzip members (RFC 1952 allows it, `gzip.compress(a) +
gzip.compress(b)`). Each member gets its own decompressor fed in slices of a memoryview at an
offset, so no pass copies the rest of the body (a body of 200,000 empty members used to be
copied once per member: quadratic). Work is bounded by the output limit, by a ratio to the
compressed size and by the member count.

A body cut short (a torn upload, a proxy closing early) keeps the whole lines that came before
the cut, as InfluxDB keeps the good lines of a partial write; the cut is reported, not raised.
"""

from __future__ import annotations

import zlib

from collectors.compat import dataclass

MAX_MEMBERS = 1000  # concatenated gzip members per body; senders use one
MAX_RATIO = 100  # inflated bytes per compressed byte, past the floor below
RATIO_FLOOR = 1 << 20  # a body may always inflate to 1 MiB: small bodies compress best
_SLICE = 1 << 16  # compressed bytes fed per call: bounds each unused_data copy
_GZIP = 16 + zlib.MAX_WBITS


class GzipRefused(ValueError):
    """A body that is refused whole; the message says why."""


class GzipTooLarge(GzipRefused):
    """Past the output limit, the ratio or the member count (an HTTP server answers 413)."""


class GzipNotValid(GzipRefused):
    """Not gzip (an HTTP server answers 400)."""


@dataclass(frozen=True, slots=True)
class Inflated:
    data: bytes
    cut: str | None = None  # why the body ended early; data then holds only whole lines


def inflate(body: bytes, *, limit: int, max_members: int = MAX_MEMBERS,
            max_ratio: int = MAX_RATIO, ratio_floor: int = RATIO_FLOOR) -> Inflated:
    """Inflate a gzip body to at most `limit` bytes and `max_ratio` times its size (or
    `ratio_floor`, whichever is larger). GzipTooLarge past those, or past `max_members`;
    GzipNotValid when it is not gzip."""
    ratio_cap = max(ratio_floor, max_ratio * len(body))
    budget = min(limit, ratio_cap)
    view = memoryview(body)
    out = bytearray()
    pos = members = 0
    while pos < len(body):
        if members == max_members:
            raise GzipTooLarge(f"gzip body holds more than {max_members} members")
        d = zlib.decompressobj(_GZIP)
        while not d.eof and pos < len(body):
            piece = view[pos:pos + _SLICE]
            try:
                # max_length one past the budget: reaching it means over the budget.
                out += d.decompress(piece, budget + 1 - len(out))
            except zlib.error as exc:
                raise GzipNotValid(f"body is not valid gzip: {exc}") from None
            if len(out) > budget:
                raise _over(limit, ratio_cap, max_ratio, len(body))
            # What this call left: the next member's bytes after an end, else nothing (the
            # output stayed within the budget, so there is no unconsumed_tail).
            pos += len(piece) - len(d.unused_data) - len(d.unconsumed_tail)
        members += 1
        if not d.eof:
            return _cut(out, f"gzip body is truncated (cut in member {members}, after "
                             f"{len(body)} compressed bytes)")
    return Inflated(bytes(out))


def _over(limit: int, ratio_cap: int, max_ratio: int, size: int) -> GzipTooLarge:
    if ratio_cap < limit:
        return GzipTooLarge(f"gzip body inflates to more than {max_ratio} times its "
                            f"{size} bytes (a compression bomb?)")
    return GzipTooLarge(f"decompressed body exceeds the limit of {limit} bytes")


def _cut(out: bytearray, reason: str) -> Inflated:
    whole = out.rfind(b"\n") + 1  # the torn last line is not parsed
    return Inflated(bytes(out[:whole]), reason + "; the incomplete last line was not parsed")
