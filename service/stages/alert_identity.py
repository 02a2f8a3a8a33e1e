"""An alert's identity: the labels that name it, and their fingerprint. Below the alert store,
which keys alerts by it, and the notifier's labels (service.notify.labels), which carry it to
receivers; one definition for both, so a stored notification log keeps matching."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

IDENTITY = ("alertname", "entity")


def identity_fingerprint(labels: Mapping[str, str]) -> str:
    """16 hex characters of a hash of the sorted identity pairs; other labels are ignored
    (the same bytes as the alert store hashed before this module, so stored notification
    logs keep matching)."""
    raw = "\x00".join(f"{k}={labels.get(k, '')}" for k in sorted(IDENTITY))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
