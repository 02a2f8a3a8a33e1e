"""Shards' pages of one listing merged into the page one process holding every node would give.

Cursors are key-based and shard-independent: a page's cursor is its last item's sort key
(service.api.paging), the same key on every shard. Each shard answers its first `limit` items
after the cursor; the merged page is the first `limit` of their union, in the listing's order,
but never past the frontier: the earliest last-key among the shards that have more (beyond
it a shard's next items are unknown). The cursor is the last kept item's key, or the frontier
when every item up to it was kept, so a merged cursor passed back to any shard, or to the
fan-out again, starts exactly after what was shown: every item once, none skipped.

Only a node's owner (by the map the merging shard reads) speaks for it: a copy a shard still
holds of a node it no longer owns (a move in progress) is left out, since its key may differ
from the owner's and it would come round a second time on another page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cmp_to_key
from typing import Any

from service.api.paging import encode
from service.api.timefmt import parse_instant

Item = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Listing:
    """A listing as the shards page it: its cursor name, each item's sort key (what its cursor
    holds) and whether the keys run descending (the listing by name, descending)."""

    name: str
    key: Callable[[Item], tuple[Any, ...]]
    descending: bool = False

    def cmp(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        """<0 when key `a` comes first in the listing."""
        c = (a > b) - (a < b)
        return -c if self.descending else c


def node_listing(sort: str, descending: bool) -> Listing:
    """/v1/nodes' keys, as service.api.views.node_list makes them."""
    sign = -1.0 if descending else 1.0
    name = f"nodes:{sort}:{'desc' if descending else 'asc'}"
    if sort == "risk":
        return Listing(name, lambda n: (sign * (-1.0 if n["risk"] is None else n["risk"]),
                                        n["node"]))
    if sort == "alerts":
        return Listing(name, lambda n: (sign * n["alerts"], n["node"]))
    return Listing(name, lambda n: (n["node"],), descending)


FLEET = Listing("fleet", lambda n: (n["node"],))  # service.api.fleet.grid: by name


def merge_page(listing: Listing, pages: Mapping[str, Item], field: str, limit: int,
               owner: Callable[[str], str], *, secret: bytes) -> tuple[list[Item], str | None]:
    """The merged page of `field`'s items (`pages`: each shard's answer, by shard id) and its
    next cursor, signed with the fleet's cursor key; `owner(node)` names the shard that owns
    a node."""
    order = cmp_to_key(listing.cmp)
    ends = [listing.key(p[field][-1]) for p in pages.values()
            if p.get("next_cursor") is not None and p[field]]
    frontier = min(ends, key=order) if ends else None
    items: list[Item] = []
    for sid, p in pages.items():
        for item in p[field]:
            if frontier is not None and listing.cmp(listing.key(item), frontier) > 0:
                break
            if owner(item["node"]) == sid:
                items.append(item)
    items.sort(key=lambda i: order(listing.key(i)))
    if len(items) > limit:
        return items[:limit], encode(listing.name, listing.key(items[limit - 1]), secret=secret)
    return items, None if frontier is None else encode(listing.name, frontier, secret=secret)


def merge_riskiest(pages: Mapping[str, Item], top: int, owner: Callable[[str], str]
                   ) -> list[Item]:
    """The `top` riskiest entities of the fleet from each shard's `top` (so exact), each from
    its node's owner, riskiest first (ties by entity key, as a stable order)."""
    ranked = sorted((i for sid, p in pages.items() for i in p["riskiest"]
                     if owner(i["node"]) == sid), key=lambda i: (-i["risk"], i["entity"]))
    return ranked[:top]


def oldest(values: Sequence[Any]) -> Any:
    """The oldest of the shards' tick times (None where a shard has not ticked): a merged
    fleet is as fresh as its stalest part."""
    known = [v for v in values if v is not None]
    return min(known, key=parse_instant) if known else None
