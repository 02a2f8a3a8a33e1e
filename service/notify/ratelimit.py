"""Per-receiver rate limits that never drop: a message over the limit is held, and everything
held for a receiver goes out as one digest as soon as a token is back."""

from __future__ import annotations

from dataclasses import dataclass

from service.notify.config import RateLimit


@dataclass(slots=True)
class Bucket:
    per_s: float
    burst: float
    tokens: float
    at: float

    @staticmethod
    def of(limit: RateLimit, now: float) -> Bucket:
        return Bucket(limit.per_hour / 3600.0, float(limit.burst), float(limit.burst), now)

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def next_at(self) -> float:
        """When the next token will be there."""
        return self.at + max(0.0, 1.0 - self.tokens) / self.per_s
