"""One definition of an alert's labels and fingerprint (service/notify/labels.py): the
fingerprint hashes the sorted identity pairs only, so it survives restarts, upgrades and level
changes; the entity key's parts become labels a Prometheus user filters on."""

from __future__ import annotations

import hashlib

import pytest

from collectors.catalog import Scope
from service.notify.labels import alert_labels, entity_parts
from service.stages.alert_identity import identity_fingerprint
from service.stages.alert_store import Alert, fingerprint


def make(entity: str, scope: Scope, node: str, level: int = 2, **kw: object) -> Alert:
    return Alert(1, entity, scope, node, level, level, "firing", 0.5, 1.0, 2.0, None,
                 [{"rule": "ecc", "signal": "sbe"}], **kw)  # type: ignore[arg-type]


def test_the_fingerprint_is_a_hash_of_the_sorted_identity_pairs() -> None:
    labels = {"entity": "n1:gpu3", "alertname": "GpuFailureRisk", "level": "2"}
    # The bytes the alert store hashed before this module: stored notification logs match.
    want = hashlib.sha256(b"alertname=GpuFailureRisk\x00entity=n1:gpu3").hexdigest()[:16]
    assert identity_fingerprint(labels) == want == fingerprint("GpuFailureRisk", "n1:gpu3")
    # Other labels (level, severity, the top signal) and their order do not count.
    assert identity_fingerprint({**labels, "level": "3", "severity": "critical"}) == want
    assert identity_fingerprint(dict(reversed(labels.items()))) == want
    assert identity_fingerprint({**labels, "entity": "n1:gpu4"}) != want
    assert identity_fingerprint({**labels, "alertname": "GpuMissing"}) != want


def test_an_alert_keeps_its_fingerprint_when_its_level_changes() -> None:
    low, high = make("n1:gpu3", Scope.GPU, "n1", 1), make("n1:gpu3", Scope.GPU, "n1", 3)
    assert low.fingerprint == high.fingerprint == identity_fingerprint(alert_labels(high, "c"))
    assert alert_labels(low, "c")["severity"] == "info"
    assert alert_labels(high, "c")["severity"] == "critical"


@pytest.mark.parametrize(("entity", "scope", "node", "parts"), [
    ("n1:gpu3", "gpu", "n1", {"gpu": "3"}),
    ("n1:gpu3:nvlink11", "nvlink", "n1", {"gpu": "3", "link": "11"}),
    ("n1:mlx5_0:1", "ib_port", "n1", {"device": "mlx5_0", "port": "1"}),
    ("n1", "node", "n1", {}),
    ("fleet", "node", "", {}),
    ("other:gpu3", "gpu", "n1", {}),  # not its node's key: no guess
])
def test_entity_parts(entity: str, scope: str, node: str, parts: dict[str, str]) -> None:
    assert entity_parts(node, entity, scope) == parts


def test_labels_of_an_nvlink_alert() -> None:
    a = make("n1:gpu3:nvlink2", Scope.NVLINK, "n1", 3, flapping=True)
    assert alert_labels(a, "west") == {
        "alertname": "NvlinkFailureRisk", "cluster": "west", "node": "n1",
        "entity": "n1:gpu3:nvlink2", "scope": "nvlink", "gpu": "3", "link": "2", "level": "3",
        "severity": "critical", "signal": "ecc", "flapping": "true"}
