"""What the fuzz run's inputs made the service send out: a real webhook receiver on loopback
(bench.soak_receiver) takes every notification of level 2 and above (the service's route to
it), and the run counts them once it is over.

Every valid input carries healthy values only, so a page (level 3) or a drain during the run
is hostile input trusted; a level-2 notification naming a node that no valid input names (a
phantom: a one-shot name from the wire) is a notification per phantom name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak_receiver import NoPages, Receiver

PATH = "/notify"


@dataclass
class Notified:
    notifications: int = 0  # webhook posts (each a group of alerts)
    pages: int = 0  # firing alerts of level 3 in them
    level2: int = 0  # firing alerts of level 2
    level2_phantom: int = 0  # ... naming a node no valid input names
    phantom_nodes: list[str] = field(default_factory=list)  # the first few of those nodes


def route(receiver_url: str) -> dict[str, Any]:
    """The `notify` settings: level 2 and above to the receiver, the rest to the log."""
    return {"receivers": [{"name": "hook", "type": "webhook",
                           "config": {"url": f"{receiver_url}{PATH}"}}],
            "route": {"receiver": "record", "group_by": ["node"], "group_wait_s": 1,
                      "group_interval_s": 5, "repeat_interval_s": 86400,
                      "routes": [{"matchers": ["level>=2"], "receiver": "hook"}]}}


def start(root: Path) -> Receiver:
    rec = Receiver(NoPages(), root / "notifications.jsonl")
    rec.start()
    return rec


def count(rec: Receiver, known_nodes: frozenset[str], show: int = 10) -> Notified:
    out = Notified()
    phantoms: set[str] = set()
    for got in rec.of(PATH):
        out.notifications += 1
        for a in got.body.get("alerts", []):
            if a.get("status") != "firing":
                continue
            labels = a.get("labels", {})
            level = int(labels.get("level", 0) or 0)
            if level >= 3:
                out.pages += 1
            elif level == 2:
                out.level2 += 1
                node = str(labels.get("node", ""))
                if node not in known_nodes:
                    out.level2_phantom += 1
                    phantoms.add(node)
    out.phantom_nodes = sorted(phantoms)[:show]
    return out
