"""What agents report reaches /metrics bounded and clean: an error string is a label value, so
credentials in it are redacted, control characters and long text cut; the number of
(host, collector) pairs remembered is capped, since names come from the wire."""

from __future__ import annotations

from collectors.collector_status import CollectorReport
from service.runtime.metrics import label_text
from service.runtime.remote_collectors import RemoteCollectors


def test_error_labels_are_redacted_one_line_and_bounded() -> None:
    text = label_text("push failed: Authorization: Bearer s3cr3t-t0ken\npassword=hunter2 \x00"
                      + "x" * 500)
    assert "s3cr3t" not in text and "hunter2" not in text and "[REDACTED]" in text
    assert text.isprintable() and len(text) <= 120 and text.endswith("…")


def _report(host: str, ts: float) -> CollectorReport:
    return CollectorReport(host=host, collector="nvml", up=False, error="down", ts=ts,
                           scrape_seconds=0.1, samples=0)


def test_new_collector_pairs_past_the_cap_are_refused() -> None:
    rc = RemoteCollectors(15.0, max_collectors=3)
    rc.record(_report(f"n{i}", 100.0) for i in range(5))
    assert [s.host for s in rc.statuses(101.0)] == ["n0", "n1", "n2"] and rc.refused == 2
    rc.record([_report("n1", 102.0)])  # a known pair still updates
    assert {s.host: s.at for s in rc.statuses(103.0)}["n1"] == 102.0
