"""Renderings: label text from alert sources must never become markup."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from service.notify.receivers.render import html_body, one_line, spoken, text_body
from service.notify.receivers.twilio import twiml
from tests.notify.receivers.samples import alert, message, resolved

# Printable text including markup characters; XML 1.0 cannot carry most control characters.
label = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF), min_size=1,
                max_size=40)


@settings(max_examples=60, deadline=None)
@given(entity=label, summary=label, signal=label)
def test_html_escapes_every_label(entity: str, summary: str, signal: str) -> None:
    a = alert(entity, summary=summary)
    a = replace(a, explanation=({"rule": "r", "signal": signal, "value": 1.0},))
    body = html_body(message(a))
    for text in (entity, summary, signal):
        assert html.escape(text) in body
    ET.fromstring(twiml(spoken(message(a))))  # well-formed whatever the labels say


def test_a_script_label_stays_text() -> None:
    body = html_body(message(alert("<script>alert(1)</script>")))
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_only_http_links_become_anchors() -> None:
    a = replace(alert(), url="javascript:alert(1)")
    body = html_body(message(a))
    assert "<a href=\"javascript" not in body and "javascript:alert(1)" in body


def test_text_lists_firing_then_resolved_with_explanations() -> None:
    m = message(alert("gpu3"), alert("gpu1", status="resolved", ends_at=1_700_000_100.0))
    text = text_body(m)
    assert text.splitlines()[0] == m.title
    assert "started: 2023-11-14 22:13:20 UTC" in text
    assert "ended: 2023-11-14 22:15:00 UTC" in text
    assert "- thermal: gpu_temp_c = 91.5 (threshold 85), risk 0.62" in text
    assert text.index("Firing (1)") < text.index("Resolved (1)")


def test_one_line_and_spoken_summaries() -> None:
    m = message(alert("gpu3", risk=0.5), alert("gpu5", risk=0.93, summary="Xid 79\nfell off"))
    line = one_line(m)
    assert "\n" not in line and "Xid 79 fell off (risk 0.93)" in line
    assert len(one_line(m, limit=20)) == 20
    said = spoken(m)
    assert said.index("gpu5") < said.index("gpu3")  # the riskiest first
    assert spoken(resolved(m)) == "gpuhealth. Resolved on node node-7: 2 alert(s) cleared."


def test_a_gpu_alert_names_its_board_in_mail_text_and_html() -> None:
    board = ("NVIDIA H100 80GB HBM3 serial 1654922031230, UUID GPU-5b1e7c2a-93d4-4f0e-a1b2-"
             "0c3d4e5f6a70, bus 00000000:12:00.0")
    a = alert("gpu3")
    a = replace(a, annotations={**a.annotations, "board": board})
    assert f"    board: {board}" in text_body(message(a))
    assert f"<td>{html.escape(board)}</td>" in html_body(message(a))
    assert "board:" not in text_body(message(alert("gpu3")))  # none said, none shown
