"""Email over SMTP (aiosmtplib). TLS is explicit: with "starttls" a server that does not offer
STARTTLS is an error rather than a silent downgrade, and certificates are verified unless the
config says otherwise (smtplib's starttls() does not verify without a context; a MITM could
read the password). Mails of one group thread together under one References id."""

from __future__ import annotations

import ipaddress
import re
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Annotated, Literal, Self, TypeVar

import aiosmtplib
from pydantic import AfterValidator, Field, FilePath, SecretStr, model_validator

from service.notify.message import Delivery, Message
from service.notify.receivers._common import MAX_DETAIL, ReceiverConfig, redact
from service.notify.receivers.render import html_body, text_body

TlsMode = Literal["starttls", "implicit", "none"]
DEFAULT_PORTS: dict[str, int] = {"starttls": 587, "implicit": 465, "none": 25}
E = TypeVar("E", bound=BaseException)
_ADDR = re.compile(r"^[^@\s<>,;\"]+@[^@\s<>,;\"]+$")


def _address(v: str) -> str:
    """A bare address or `Name <address>`; no line breaks (header injection)."""
    if "\r" in v or "\n" in v or not _ADDR.match(parseaddr(v)[1]):
        raise ValueError(f"not an email address: {v!r}")
    return v.strip()


Address = Annotated[str, AfterValidator(_address)]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EmailConfig(ReceiverConfig):
    to: list[Address] = Field(min_length=1)
    from_addr: Address
    host: str = Field(min_length=1)
    port: int | None = Field(default=None, ge=1, le=65535)  # None: 587, 465 or 25 by tls
    tls: TlsMode = "starttls"
    verify: bool = True
    ca_file: FilePath | None = None  # trusted instead of the system store, e.g. a private CA
    username: SecretStr | None = None
    password: SecretStr | None = None
    hello: str | None = Field(default=None, min_length=1)  # EHLO name; None: this host's FQDN

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.username is not None and self.tls == "none" and not _is_loopback(self.host):
            raise ValueError("refusing to send a password without TLS to a remote host")
        if self.ca_file is not None and (self.tls == "none" or not self.verify):
            raise ValueError("ca_file needs tls starttls/implicit and verify true")
        return self

    @property
    def effective_port(self) -> int:
        return self.port or DEFAULT_PORTS[self.tls]


def tls_context(config: EmailConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(
        cafile=str(config.ca_file) if config.ca_file is not None else None)
    if not config.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _one_line(text: str) -> str:
    return " ".join(text.split())


def build_mail(msg: Message, config: EmailConfig) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"] = _one_line(f"[gpuhealth] {msg.title}")
    mail["From"] = config.from_addr
    mail["To"] = ", ".join(config.to)
    mail["Date"] = formatdate(usegmt=True)
    # The message's id: a resend after a crash is the same mail to a client that dedups.
    mail["Message-ID"] = f"<{msg.id}@gpuhealth>" if msg.id else make_msgid(domain="gpuhealth")
    # A root id nobody sent: every mail of the group replies to it, so clients thread them.
    thread = f"<{msg.dedup_key}@gpuhealth>"
    mail["In-Reply-To"] = thread
    mail["References"] = thread
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation auto-replies
    mail["X-Gpuhealth-Group"] = msg.dedup_key
    mail.set_content(text_body(msg))
    mail.add_alternative(html_body(msg), subtype="html")
    return mail


def _find(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of `kind` in the cause/context chain (aiosmtplib wraps)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def classify(exc: BaseException, where: str) -> Delivery:
    """SMTP 4xx and network trouble are transient; 5xx, TLS and config problems are not."""
    if cert := _find(exc, ssl.SSLCertVerificationError):
        why = cert.verify_message or cert.reason or str(cert)
        return Delivery(ok=False, retry=False,
                        detail=f"TLS certificate verification failed for {where}: {why}")
    if tls := _find(exc, ssl.SSLError):
        return Delivery(ok=False, retry=False,
                        detail=f"TLS handshake with {where} failed: {tls.reason or tls}")
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        said = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
        return Delivery(ok=False, retry=any(400 <= c < 500 for c in codes),
                        detail=f"all recipients refused: {said}")
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return Delivery(ok=False, retry=400 <= exc.code < 500,
                        detail=f"SMTP {exc.code} from {where}: {exc.message}")
    if isinstance(exc, TimeoutError):  # SMTPTimeoutError included
        return Delivery(ok=False, retry=True, detail=f"timed out talking to {where}")
    if isinstance(exc, ConnectionError | OSError):  # refused, reset, disconnected
        return Delivery(ok=False, retry=True, detail=f"connection to {where} failed: {exc}")
    # SMTPNotSupported, STARTTLS not offered, an unsendable address: retrying won't help.
    return Delivery(ok=False, retry=False, detail=f"{where}: {type(exc).__name__}: {exc}")


class EmailReceiver:
    """A Notifier sending one multipart (text + HTML) mail per message."""

    def __init__(self, name: str, config: EmailConfig) -> None:
        self.name = name
        self.config = config
        self._tls: ssl.SSLContext | None = None
        # The password only: blanking a short username would garble the whole detail.
        self._secrets = [config.password.get_secret_value()] if config.password else []

    def _context(self) -> ssl.SSLContext | None:
        if self.config.tls == "none":
            return None
        if self._tls is None:
            self._tls = tls_context(self.config)
        return self._tls

    async def notify(self, msg: Message) -> Delivery:
        cfg = self.config
        where = f"{cfg.host}:{cfg.effective_port}"
        mail = build_mail(msg, cfg)
        try:
            refused, _ = await aiosmtplib.send(
                mail, sender=parseaddr(cfg.from_addr)[1],
                recipients=[parseaddr(a)[1] for a in cfg.to],
                hostname=cfg.host, port=cfg.effective_port, local_hostname=cfg.hello,
                use_tls=cfg.tls == "implicit", start_tls=cfg.tls == "starttls",
                tls_context=self._context(), timeout=cfg.timeout_s,
                username=cfg.username.get_secret_value() if cfg.username else None,
                password=cfg.password.get_secret_value() if cfg.password else None)
        except (aiosmtplib.SMTPException, OSError, TimeoutError, ValueError) as exc:
            d = classify(exc, where)
            return Delivery(ok=False, retry=d.retry,
                            detail=redact(d.detail, self._secrets)[:MAX_DETAIL])
        detail = f"accepted by {where}"
        if refused:  # some recipients refused: a retry would mail the others twice
            detail += "; refused " + "; ".join(f"{a}: {r.code} {r.message}"
                                               for a, r in refused.items())
        return Delivery(ok=True, detail=redact(detail, self._secrets)[:MAX_DETAIL],
                        key=str(mail["Message-ID"]))

    async def aclose(self) -> None:
        """Nothing held between sends; here so every receiver can be closed alike."""
