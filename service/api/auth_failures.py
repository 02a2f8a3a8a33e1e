"""Failed authentications, limited per presented credential and per client address, so that a
bad-token client locks out only itself: never a valid credential, never a read that needs none.

- A credential that keeps failing (an agent or script with a stale token) is answered 429 after
  the burst, from any address; other clients at its address go on as before.
- An address that keeps presenting *new* wrong credentials (guessing) is answered 429 for any
  credential that could be guessed: write tokens are operator-chosen strings. A credential that
  passed before (an agent already at work) still passes, and API tokens (`ghk_`, 256 random
  bits) are always checked: saying which one is right tells a guesser nothing usable.
- A request with no credential is not charged and not refused here: anonymous reads pass where
  settings allow them.

Credentials are kept only as a digest prefix. The address is the peer's, or the client a
trusted proxy names (settings.service.trusted_proxies): never a header from anyone else.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from service.api.ratelimit import RateLimiter

_MAX_KEYS = 10_000  # credentials and addresses each; the stalest bucket goes past it
_MAX_GOOD = 1_024  # credentials seen passing


def identity(credential: str) -> str:
    """What a credential is remembered by: a digest prefix, never the credential."""
    return hashlib.sha256(credential.encode("utf-8", "surrogateescape")).hexdigest()[:32]


class AuthFailures:
    def __init__(self, per_min: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.by_credential = RateLimiter(per_min, burst, clock, max_keys=_MAX_KEYS)
        self.by_address = RateLimiter(per_min, burst, clock, max_keys=_MAX_KEYS)
        self._good: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def refusal(self, ident: str, address: str, guessable: bool) -> float:
        """Seconds until credential `ident` may be tried from `address`; 0: check it now."""
        with self._lock:
            if ident in self._good:
                return 0.0
        wait = self.by_credential.waiting(ident)
        if wait > 0 or not guessable:
            return wait
        return self.by_address.waiting(address)

    def passed(self, ident: str) -> None:
        with self._lock:
            self._good[ident] = None
            self._good.move_to_end(ident)
            while len(self._good) > _MAX_GOOD:
                self._good.popitem(last=False)

    def failed(self, ident: str, address: str) -> None:
        """Charge a failure to the credential, and to the address when the credential has not
        failed before: one stale token repeated is one client's problem, many wrong ones are
        guessing."""
        with self._lock:
            self._good.pop(ident, None)  # revoked or expired since
        new = ident not in self.by_credential
        self.by_credential.acquire(ident)
        if new:
            self.by_address.acquire(address)
