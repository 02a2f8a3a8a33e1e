"""Diagnostic verdicts reach InfluxDB as the remediation channel's annotations: a gate or a
sweep that failed or could not run is written not ok, with the failed checks in its detail."""

from __future__ import annotations

from service.history.influx.record import TickRecorder
from service.remediation.actions import AuditEntry


def test_diagnostic_audit_rows_are_annotations_with_their_verdict() -> None:
    rows = [AuditEntry(at=100.0, actor="gate", event="gate_failed", action_id="act-1",
                       node="n1", mode="auto",
                       result="dcgm_r3 failed: memory on GPU 2: fail; n1 stays drained"),
            AuditEntry(at=101.0, actor="gate", event="sweep_pass", node="n2",
                       result="dcgm_r2: pass"),
            AuditEntry(at=102.0, actor="gate", event="sweep_error", node="n3",
                       result="dcgm_r2 could not run: n3 is not idle")]
    lines = list(TickRecorder("c1").actions(rows))
    assert len(lines) == 3
    assert lines[0].startswith("action,") and "host=n1" in lines[0]
    assert "kind=\"gate_failed\",ok=false" in lines[0] and "memory on GPU 2" in lines[0]
    assert "kind=\"sweep_pass\",ok=true" in lines[1]
    assert "kind=\"sweep_error\",ok=false" in lines[2]
