"""Human-readable renderings of a Message: a plain-text and an HTML body (email), a one-line
summary (PagerDuty, subjects) and a spoken summary (voice calls). Labels come from alert
sources, so the HTML escapes every value and only http(s) URLs become links."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from service.notify.message import LEVEL_SEVERITY, AlertRef, Message
from service.notify.values import value_text

MAX_SIGNALS = 10  # per alert; the strongest come first, the tail adds little


def utc_text(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return "n/a" if x is None else str(x)
    return f"{x:.4g}"


def signal_text(sig: Mapping[str, Any]) -> str:
    """One explanation line, from Signal.as_dict; tolerant of missing or extra keys."""
    if "signal" not in sig:
        return ", ".join(f"{k}={v}" for k, v in sig.items())
    name = str(sig.get("rule") or "")
    rule = f"{name}: " if name else ""
    text = f"{rule}{sig['signal']} = {value_text(name, sig.get('value'))}"
    if "threshold" in sig and value_text(name, sig.get("threshold")) != "n/a":
        text += f" (threshold {value_text(name, sig.get('threshold'))})"
    if "risk" in sig:
        text += f", risk {_num(sig.get('risk'))}"
    if sig.get("hard"):
        text += " [hard]"
    return text


def _signals(a: AlertRef) -> list[str]:
    lines = [signal_text(s) for s in a.explanation[:MAX_SIGNALS]]
    if len(a.explanation) > MAX_SIGNALS:
        lines.append(f"... and {len(a.explanation) - MAX_SIGNALS} more")
    return lines


def _facts(a: AlertRef) -> list[tuple[str, str]]:
    facts = [
        ("entity", a.labels.get("entity", "?")),
        ("node", a.labels.get("node", "?")),
        ("level", f"{a.level} ({LEVEL_SEVERITY.get(a.level, 'info')})"),
        ("risk", f"{a.risk:.2f}"),
        ("started", utc_text(a.starts_at)),
    ]
    if a.ends_at is not None:
        facts.append(("ended", utc_text(a.ends_at)))
    if board := a.annotations.get("board"):  # the GPU board, for an RMA (service.notify.refs)
        facts.append(("board", board))
    return facts


def _sections(msg: Message) -> Iterable[tuple[str, tuple[AlertRef, ...]]]:
    for heading, alerts in (("Firing", msg.firing), ("Resolved", msg.resolved)):
        if alerts:
            yield f"{heading} ({len(alerts)})", alerts


def text_body(msg: Message) -> str:
    out = [msg.title, ""]
    for heading, alerts in _sections(msg):
        out += [heading, "-" * len(heading)]
        for a in alerts:
            out.append(f"* {a.summary}")
            out += [f"    {k}: {v}" for k, v in _facts(a)]
            if desc := a.annotations.get("description"):
                out.append(f"    {desc}")
            if a.explanation:
                out.append("    why:")
                out += [f"      - {line}" for line in _signals(a)]
            if a.url:
                out.append(f"    details: {a.url}")
            if verdict := a.annotations.get("verdict_url"):
                out.append(f"    failure, false alarm or maintenance? {verdict}")
            out.append("")
    if msg.digest_of:
        out.append(f"Digest of {len(msg.digest_of)} group(s) held back by a rate limit.")
    if msg.external_url:
        out.append(f"gpuhealth: {msg.external_url}")
    return "\n".join(out).rstrip() + "\n"


def _link(url: str, text: str) -> str:
    # A label-controlled "javascript:" URL must not become a clickable link.
    if url.lower().startswith(("http://", "https://")):
        return f'<a href="{html.escape(url)}">{html.escape(text)}</a>'
    return html.escape(url)


def html_body(msg: Message) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8"></head>',
           '<body style="font-family: sans-serif">', f"<h2>{e(msg.title)}</h2>"]
    for heading, alerts in _sections(msg):
        out.append(f"<h3>{e(heading)}</h3>")
        for a in alerts:
            out.append(f"<h4>{e(a.summary)}</h4>")
            out.append("<table>")
            out += [f"<tr><th align=\"left\">{e(k)}</th><td>{e(v)}</td></tr>"
                    for k, v in _facts(a)]
            out.append("</table>")
            if desc := a.annotations.get("description"):
                out.append(f"<p>{e(desc)}</p>")
            if a.explanation:
                out.append("<p>Why:</p><ul>")
                out += [f"<li>{e(line)}</li>" for line in _signals(a)]
                out.append("</ul>")
            if a.url:
                out.append(f"<p>Details: {_link(a.url, a.url)}</p>")
            if verdict := a.annotations.get("verdict_url"):
                out.append(f"<p>{_link(verdict, 'Failure, false alarm or maintenance?')}</p>")
    if msg.digest_of:
        out.append(f"<p>Digest of {len(msg.digest_of)} group(s) held back by a rate limit.</p>")
    if msg.external_url:
        out.append(f"<p>{_link(msg.external_url, 'gpuhealth')}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def one_line(msg: Message, limit: int = 1024) -> str:
    """The title plus the strongest firing alert's summary, on one line, at most `limit`."""
    text = msg.title
    if msg.firing:
        top = max(msg.firing, key=lambda a: (a.level, a.risk))
        text += f" | {top.summary} (risk {top.risk:.2f})"
    return truncate(" ".join(text.split()), limit)


def spoken(msg: Message, max_alerts: int = 3) -> str:
    """Short plain sentences for text-to-speech: no brackets, URLs or signal tables."""
    node = msg.group_labels.get("node", "")
    where = f" on node {node}" if node else ""
    if msg.status == "resolved":
        return f"gpuhealth. Resolved{where}: {len(msg.alerts)} alert(s) cleared."
    firing = sorted(msg.firing, key=lambda a: (-a.level, -a.risk))
    parts = [f"gpuhealth alert. Level {msg.level}, {msg.severity}{where}.",
             f"{len(firing)} alert(s) firing."]
    for a in firing[:max_alerts]:
        parts.append(f"{a.labels.get('entity', 'unknown')}: {a.summary}, "
                     f"risk {round(a.risk * 100)} percent.")
    if len(firing) > max_alerts:
        parts.append(f"And {len(firing) - max_alerts} more.")
    return truncate(" ".join(" ".join(parts).split()), 1000)
