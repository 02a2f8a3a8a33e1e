"""Rate limits for mutating routes: a token bucket per principal.

Each token may make `rate_limit_burst` requests at once, then `rate_limit_per_min` a minute
(settings.api); beyond that the answer is 429 with Retry-After (service.api.guards.mutating).
The same buckets limit failed authentications (service.api.auth_failures).
"""

# No `from __future__ import annotations`: FastAPI resolves string annotations in module
# globals, and the dependencies below are closures over their scope.

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Token buckets by key, refilled continuously. Keys are token ids, so the table stays as
    small as the token list."""

    def __init__(self, per_min: float, burst: int,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 0) -> None:
        """`max_keys` > 0 bounds the table (keys that come from the wire, such as client
        addresses): past it the stalest bucket goes."""
        if per_min <= 0 or burst < 1:
            raise ValueError("a rate limit needs per_min > 0 and burst >= 1")
        self.per_s = per_min / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()
        self.max_keys = max_keys

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._buckets

    def waiting(self, key: str) -> float:
        """Seconds until `key` may go again (0 now), taking nothing."""
        with self._lock:
            got = self._buckets.get(key)
            if got is None:
                return 0.0
            tokens = min(self.burst, got[0] + max(0.0, self._clock() - got[1]) * self.per_s)
            return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.per_s

    def acquire(self, key: str) -> float:
        """Take one request's worth for `key`: 0 when allowed, else the seconds until it would
        be (nothing is taken then)."""
        with self._lock:
            now = self._clock()
            if self.max_keys and key not in self._buckets and \
                    len(self._buckets) >= self.max_keys:
                del self._buckets[min(self._buckets, key=lambda k: self._buckets[k][1])]
            tokens, at = self._buckets.get(key, (self.burst, now))
            # max(0, ...): a wall clock stepped back must not drain the bucket.
            tokens = min(self.burst, tokens + max(0.0, now - at) * self.per_s)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.per_s
