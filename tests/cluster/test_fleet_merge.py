"""Shards' pages merged (service.api.fleet_merge): paging through merged pages gives exactly the
listing one process holding every node gives; a stale copy on a shard that no longer owns the
node is left out."""

from __future__ import annotations

import random
from typing import Any

import pytest

from service.api.fleet_merge import merge_page, merge_riskiest, node_listing
from service.api.paging import decode, encode

KEY = b"k" * 32  # the fleet's cursor key (service.api.cursor_key)


def _shard_page(rows: list[dict[str, Any]], sort: str, desc: bool, limit: int,
                cursor: str | None) -> dict[str, Any]:
    """A shard's page as service.api.views.node_list gives it (keys as it makes them)."""
    listing = node_listing(sort, desc)
    ordered = sorted(rows, key=listing.key, reverse=listing.descending)
    if cursor is not None:
        cut = tuple(decode(listing.name, cursor, secret=KEY))
        ordered = [r for r in ordered if listing.cmp(listing.key(r), cut) > 0]
    page = ordered[:limit]
    more = len(ordered) > limit
    return {"nodes": page, "next_cursor": encode(listing.name, listing.key(page[-1]), secret=KEY)
            if more else None}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("sort", "desc"), [("risk", True), ("risk", False), ("node", True),
                                            ("node", False), ("alerts", True)])
def test_paging_merged_pages_visits_every_node_once_in_order(seed: int, sort: str,
                                                             desc: bool) -> None:
    rnd = random.Random(seed)
    owner = {f"n{i:03d}": rnd.choice("abc") for i in range(40)}
    rows = {n: {"node": n, "risk": rnd.choice([None, 0.0, 0.5, 1.0]),
                "alerts": rnd.randint(0, 3)} for n in owner}
    held: dict[str, list[dict[str, Any]]] = {s: [] for s in "abc"}
    for n, s in owner.items():
        held[s].append(rows[n])
    # nodes mid-move: a stale copy (another risk) still on a shard that does not own them
    for n in rnd.sample(sorted(owner), 6):
        other = next(s for s in "abc" if s != owner[n])
        held[other].append({**rows[n], "risk": 0.25, "alerts": 7})
    listing = node_listing(sort, desc)
    want = [r["node"] for r in sorted(rows.values(), key=listing.key,
                                      reverse=listing.descending)]
    for limit in (1, 2, 7, 100):
        seen: list[dict[str, Any]] = []
        cursor = None
        while True:
            pages = {s: _shard_page(held[s], sort, desc, limit, cursor) for s in "abc"}
            got, cursor = merge_page(listing, pages, "nodes", limit, owner.__getitem__,
                                     secret=KEY)
            assert len(got) <= limit
            seen += got
            if cursor is None:
                break
        names = [r["node"] for r in seen]
        # every node once, in order, as its owner has it
        assert names == want and seen == [rows[n] for n in want], limit


def test_the_riskiest_are_cut_at_top_one_per_entity() -> None:
    def e(entity: str, risk: float) -> dict[str, Any]:
        return {"entity": entity, "node": entity.split(":")[0], "risk": risk}

    pages = {"a": {"riskiest": [e("n1:gpu0", 0.9), e("n1:gpu1", 0.4)]},
             "b": {"riskiest": [e("n2:gpu0", 0.7), e("n1:gpu0", 0.1)]},  # n1 stale on b
             "c": {"riskiest": [e("n3:gpu0", 0.95)]}}
    owner = {"n1": "a", "n2": "b", "n3": "c"}.__getitem__
    got = merge_riskiest(pages, 3, owner)
    assert [(x["entity"], x["risk"]) for x in got] == [("n3:gpu0", 0.95), ("n1:gpu0", 0.9),
                                                       ("n2:gpu0", 0.7)]
