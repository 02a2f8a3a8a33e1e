"""Which GPU identities an agent's round sends: a GPU's when it is new or changed, and an
unchanged one again at most every `every_s` (default IDENTITY_EVERY_S).

Identity (collectors.identity) is a slowly-changing attribute: sources read it every round,
but a service that stores it once per change gains nothing from hearing it each 5-s round,
and every round would pay for its lines on the node, the wire and the service. Sending it
again every few minutes is what lets a service that restarted, or a shard that took this
node over, relearn it without asking. "Changed" is a value said now that differs from the one
sent (a swapped board's serial, a new driver); a value not said this round (a source down,
dcgm-exporter naming no serial) is no change, so sources that say different parts of one
GPU's identity do not make it go every round. The gate runs before the round is spooled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from collectors.identity import GpuIdentity

IDENTITY_EVERY_S = 300.0
MAX_GPUS = 65_536  # GPUs remembered (a node has a few; a replayed trace a cluster's)


class IdentityGate:
    def __init__(self, every_s: float = IDENTITY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not every_s >= 0:
            raise ValueError(f"identity resend interval {every_s}: give 0 or more seconds")
        self.every_s, self.clock = every_s, clock
        # per GPU key: what was sent of it so far (joined), and when it last went
        self._sent: dict[str, tuple[GpuIdentity, float]] = {}

    def take(self, said: Mapping[str, GpuIdentity]) -> dict[str, GpuIdentity]:
        """Of the identities a round's sources said (by GPU key), those to send now."""
        now = self.clock()
        out: dict[str, GpuIdentity] = {}
        for key, ident in said.items():
            if not ident:
                continue
            known = self._sent.get(key)
            if known is not None:
                joined = known[0].merged(ident)
                if joined == known[0] and now - known[1] < self.every_s:
                    continue
            else:
                joined = ident
                if len(self._sent) >= MAX_GPUS:  # forgetting costs one early resend each
                    self._sent.clear()
            out[key] = ident
            self._sent[key] = (joined, now)
        return out
