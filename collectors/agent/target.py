"""One place an agent sends its rounds to: a spool of its own (what that target has not taken
yet), its pusher and its backoff. An agent with two targets (the two replicas of an HA pair,
as a Prometheus HA pair scrapes the same targets) keeps one of these per target, so a target
that is down neither holds the other back nor loses its own backlog."""

from __future__ import annotations

import logging
from collections.abc import Callable

from collectors.agent.push import Outcome, Pusher, PushResult
from collectors.agent.spool import Spool
from collectors.compat import dataclass

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Sent:
    """What one flush of one target did."""

    sent: int = 0
    rejected_lines: int = 0  # sent, the target refused some lines (400)
    dropped: int = 0  # refused whole (413)
    failed: bool = False  # a push failed: backing off
    error: str = ""


class Target:
    """`send`: how a spooled segment goes (default `pusher.push`; the relay sends its Arrow
    bodies with their fallbacks)."""

    def __init__(self, spool: Spool, pusher: Pusher | None, *,
                 backoff_s: tuple[float, float] = (1.0, 60.0),
                 clock: Callable[[], float],
                 send: Callable[[bytes], PushResult] | None = None,
                 narrow: Callable[[bytes, tuple[str, ...]], bytes | None] | None = None
                 ) -> None:
        """`narrow(segment, nodes)`: the segment cut to those nodes' samples (None: keep it
        whole), for a target that kept all but theirs (a 503 naming pending nodes)."""
        self.spool, self.pusher, self.clock = spool, pusher, clock
        self.narrow = narrow
        self.send = send if send is not None else (pusher.push if pusher is not None else None)
        self.backoff_min, self.backoff_max = backoff_s
        self._backoff = self.backoff_min
        self._retry_at = float("-inf")

    def retry_now(self) -> None:
        """Forget the backoff (a stopping relay's last attempt)."""
        self._retry_at = float("-inf")

    @property
    def name(self) -> str:
        return self.pusher.url if self.pusher is not None else "(none)"

    def flush(self) -> Sent:
        """Send spooled segments in order until one fails, then back off."""
        out = Sent()
        if self.send is None or self.clock() < self._retry_at:
            return out
        while (seg := self.spool.oldest()) is not None:
            seq, body = seg
            res = self.send(body)
            if res.outcome is Outcome.RETRY:
                out.failed = True
                out.error = f"{res.status}: {res.detail}" if res.status else res.detail
                if res.pending_nodes is not None:
                    self._narrow(seq, body, res.pending_nodes)
                if res.retry_after is not None:  # the target said when: no doubling
                    wait = min(res.retry_after, self.backoff_max)
                else:
                    wait = self._backoff
                    self._backoff = min(self._backoff * 2, self.backoff_max)
                self._retry_at = self.clock() + wait
                log.warning("push to %s failed (%s); retrying in %.0f s", self.name, out.error,
                            wait)
                return out
            if res.outcome is Outcome.DROP:
                out.dropped += 1
                log.error("%s refused a segment whole (%s): %s", self.name, res.status,
                          res.detail)
            elif res.status == 400:
                out.rejected_lines += 1
                log.warning("%s refused some lines: %s", self.name, res.detail)
            self.spool.remove(seq)
            out.sent += 1
        self._backoff = self.backoff_min
        return out

    def _narrow(self, seq: int, body: bytes, nodes: tuple[str, ...]) -> None:
        """Keep only the pending nodes' samples of the segment (the rest was taken), so what
        is sent again is what the target still lacks."""
        if self.narrow is None:
            return
        cut = self.narrow(body, nodes)
        if cut is not None:
            self.spool.replace(seq, cut)
