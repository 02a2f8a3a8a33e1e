"""Email against a real SMTP server (aiosmtpd) on loopback: plain, STARTTLS and implicit TLS
with a throwaway CA, temporary and permanent refusals, and a closed port."""

from __future__ import annotations

import asyncio
import email
import email.policy
from email.message import EmailMessage
from typing import Any

import pytest

from service.notify.message import Delivery, Message
from service.notify.receivers import EmailConfig, EmailReceiver
from tests.notify.receivers.samples import alert, message, resolved
from tests.notify.receivers.servers import LOOPBACK, SmtpSink, Tls, free_port, make_tls, smtp_server

TO = ["oncall@example.org", "Backup <backup@example.org>"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("ca"))


def send(port: int, msg: Message, **cfg: Any) -> Delivery:
    config = EmailConfig(to=TO, from_addr="gpuhealth <alerts@example.org>", host=LOOPBACK,
                         port=port, timeout_s=3.0, **({"tls": "none"} | cfg))
    return asyncio.run(EmailReceiver("mail", config).notify(msg))


def parse(sink: SmtpSink, i: int = 0) -> EmailMessage:
    env = sink.envelopes[i]
    assert isinstance(env.content, bytes)
    mail = email.message_from_bytes(env.content, policy=email.policy.default)
    assert isinstance(mail, EmailMessage)
    return mail


def bodies(mail: EmailMessage) -> tuple[str, str]:
    text, html = mail.get_body(("plain",)), mail.get_body(("html",))
    assert text is not None and html is not None
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    return text.get_content(), html.get_content()


def test_plain_delivery_multipart_threaded_and_escaped() -> None:
    m = message(alert("gpu3", summary="ECC <b>errors</b> & resets"),
                alert("gpu1", status="resolved", ends_at=1_700_000_100.0))
    sink = SmtpSink()
    with smtp_server(sink) as port:
        d = send(port, m, hello="gpuhealth.test")
        d2 = send(port, resolved(m), hello="gpuhealth.test")
    assert d.ok and d.key.startswith("<") and d.key.endswith("@gpuhealth>")
    assert d2.ok and d2.key != d.key
    env = sink.envelopes[0]
    assert env.mail_from == "alerts@example.org"
    assert env.rcpt_tos == ["oncall@example.org", "backup@example.org"]
    mail = parse(sink)
    assert mail["Subject"] == f"[gpuhealth] {m.title}"
    assert mail["Message-ID"] == d.key
    thread = f"<{m.dedup_key}@gpuhealth>"
    assert mail["In-Reply-To"] == mail["References"] == thread
    later = parse(sink, 1)
    assert later["References"] == thread  # the resolve lands in the same thread
    assert later["Subject"].startswith("[gpuhealth] [RESOLVED]")
    assert mail.get_content_type() == "multipart/alternative"
    text, html = bodies(mail)
    assert "ECC <b>errors</b> & resets" in text
    assert "ecc: ecc_sbe_rate = 42 (threshold 10), risk 0.91 [hard]" in text
    assert "http://gpuhealth.test/alerts/gpu3" in text
    assert "Firing (1)" in text and "Resolved (1)" in text
    resolved_at = text.index("Resolved (1)")
    assert text.index("Firing (1)") < text.index("entity: gpu3") < resolved_at
    assert text.index("entity: gpu1") > resolved_at
    assert "ECC &lt;b&gt;errors&lt;/b&gt; &amp; resets" in html and "<b>errors" not in html
    assert '<a href="http://gpuhealth.test/alerts/gpu3">' in html
    assert "<li>thermal: gpu_temp_c = 91.5 (threshold 85), risk 0.62</li>" in html


def test_starttls_with_the_trusted_ca_delivers(tls: Tls) -> None:
    sink = SmtpSink()
    with smtp_server(sink, starttls=tls.server) as port:
        d = send(port, message(), tls="starttls", ca_file=tls.ca_file)
    assert d.ok, d.detail
    assert len(sink.envelopes) == 1


def test_starttls_without_the_ca_is_a_certificate_failure(tls: Tls) -> None:
    sink = SmtpSink()
    with smtp_server(sink, starttls=tls.server) as port:
        d = send(port, message(), tls="starttls")
    assert not d.ok and not d.retry
    assert "TLS certificate verification failed" in d.detail
    assert sink.envelopes == []


def test_starttls_refuses_a_server_that_does_not_offer_it() -> None:
    sink = SmtpSink()
    with smtp_server(sink) as port:
        d = send(port, message(), tls="starttls")
    assert not d.ok and not d.retry and "STARTTLS" in d.detail
    assert sink.envelopes == []


def test_implicit_tls_delivers_and_verifies(tls: Tls) -> None:
    sink = SmtpSink()
    with smtp_server(sink, implicit=tls.server) as port:
        d = send(port, message(), tls="implicit", ca_file=tls.ca_file)
        bad = send(port, message(), tls="implicit")
    assert d.ok, d.detail
    assert not bad.ok and not bad.retry and "certificate" in bad.detail
    assert len(sink.envelopes) == 1


def test_verify_false_accepts_an_untrusted_certificate(tls: Tls) -> None:
    sink = SmtpSink()
    with smtp_server(sink, starttls=tls.server) as port:
        d = send(port, message(), tls="starttls", verify=False)
    assert d.ok, d.detail


def test_temporary_refusal_is_retried_permanent_is_not() -> None:
    with smtp_server(SmtpSink("451 4.3.0 Try again later")) as port:
        soft = send(port, message())
    with smtp_server(SmtpSink("550 5.7.1 Rejected")) as port:
        hard = send(port, message())
    assert not soft.ok and soft.retry and "451" in soft.detail
    assert not hard.ok and not hard.retry and "550" in hard.detail


def test_connection_refused_is_retried() -> None:
    d = send(free_port(), message())
    assert not d.ok and d.retry and "connection" in d.detail


def test_password_never_appears_in_a_failure(tls: Tls) -> None:
    # The server offers no AUTH, so login fails after TLS: the detail must not echo secrets.
    with smtp_server(SmtpSink(), starttls=tls.server) as port:
        d = send(port, message(), tls="starttls", ca_file=tls.ca_file,
                 username="alerts", password="hunter2-secret")
    assert not d.ok and "hunter2-secret" not in d.detail
