"""Nodes whose clocks run fast: ingest scores their points at the service's time (never
trusting theirs) and reports them here; exported until SKEW_FORGET_S after their last such
point, with a warning once per episode, so an operator fixes NTP."""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)
SKEW_FORGET_S = 600.0  # a node's fast clock is reported this long after its last such point
MAX_SKEWED = 10_000  # nodes remembered as fast at once (names come from the wire)


class ClockAhead:
    def __init__(self) -> None:
        # node -> (seconds its clock ran ahead, when last seen so)
        self.nodes: dict[str, tuple[float, float]] = {}

    def note(self, ahead: Mapping[str, float], now: float) -> None:
        """An ingest's fast nodes (node -> seconds ahead) at `now`."""
        known = self.nodes
        for node, secs in ahead.items():
            if node not in known:
                if len(known) >= MAX_SKEWED:
                    continue
                log.warning("node %s stamps its data %.0f s ahead of this service's clock; "
                            "it is scored at the service's time (check its NTP)", node, secs)
            known[node] = (secs, now)
        for node in [n for n, (_, at) in known.items() if now - at > SKEW_FORGET_S]:
            del known[node]
