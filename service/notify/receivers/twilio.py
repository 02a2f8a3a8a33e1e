"""Direct phone paging through a Twilio-style Calls API: the fallback when the paging service
itself is down. One call per number; a resolve places no call (waking someone to say all is
well helps nobody)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated
from xml.sax.saxutils import escape

from pydantic import AnyHttpUrl, Field, SecretStr, StringConstraints

from service.notify.message import Delivery, Message
from service.notify.receivers._common import (
    MAX_DETAIL,
    HttpClient,
    ReceiverConfig,
    base_url,
    failure,
)
from service.notify.receivers.render import spoken

E164 = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^\+[1-9]\d{1,14}$")]
REMEMBERED = 256  # messages whose per-number outcomes are kept for retries


class TwilioConfig(ReceiverConfig):
    # It goes into the URL path, so only the characters a real SID has.
    account_sid: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9]+$")
    auth_token: SecretStr = Field(min_length=1)
    from_number: E164
    to: list[E164] = Field(min_length=1)
    url: AnyHttpUrl = AnyHttpUrl("https://api.twilio.com")


def twiml(text: str) -> str:
    """Said twice: the first time often goes to a half-awake "hello?"."""
    say = f"<Say>{escape(text)}</Say>"
    return f'<Response>{say}<Pause length="1"/>{say}</Response>'


def mask(number: str) -> str:
    return "***" + number[-4:]


class TwilioReceiver:
    """A Notifier placing voice calls. A retry of the same message only calls the numbers
    whose call failed with a retryable error, so a flaky API never rings anyone twice."""

    def __init__(self, name: str, config: TwilioConfig) -> None:
        self.name = name
        self.config = config
        self._http = HttpClient(config.timeout_s, [config.auth_token.get_secret_value()])
        self._outcomes: OrderedDict[tuple[str, float, str], dict[str, Delivery]] = (
            OrderedDict())

    @property
    def calls_url(self) -> str:
        sid = self.config.account_sid
        return f"{base_url(self.config.url)}/2010-04-01/Accounts/{sid}/Calls.json"

    async def notify(self, msg: Message) -> Delivery:
        if msg.status == "resolved":
            return Delivery(ok=True, detail="no call for a resolve")
        key = (msg.group_key, msg.at, msg.reason)
        outcomes = self._outcomes.setdefault(key, {})
        self._outcomes.move_to_end(key)
        while len(self._outcomes) > REMEMBERED:
            self._outcomes.popitem(last=False)
        body = twiml(spoken(msg))
        for number in self.config.to:
            done = outcomes.get(number)
            if done is None or done.retry:
                outcomes[number] = await self._call(number, body)
        return _summary(outcomes)

    async def _call(self, number: str, body: str) -> Delivery:
        got = await self._http.post(
            self.calls_url,
            data={"To": number, "From": self.config.from_number, "Twiml": body},
            auth=(self.config.account_sid, self.config.auth_token.get_secret_value()))
        if isinstance(got, Delivery):
            return got
        if not got.is_success:
            return failure(got, self._http.secrets)
        try:
            sid = got.json().get("sid", "")
        except (ValueError, AttributeError):
            sid = ""
        return Delivery(ok=True, key=sid if isinstance(sid, str) else "")

    async def aclose(self) -> None:
        await self._http.aclose()


def _summary(outcomes: dict[str, Delivery]) -> Delivery:
    failed = {n: d for n, d in outcomes.items() if not d.ok}
    placed = len(outcomes) - len(failed)
    detail = f"{placed}/{len(outcomes)} call(s) placed"
    if failed:
        detail += "; " + "; ".join(f"{mask(n)}: {d.detail}" for n, d in failed.items())
    waits = [d.retry_after_s for d in failed.values() if d.retry and d.retry_after_s]
    return Delivery(ok=not failed, retry=any(d.retry for d in failed.values()),
                    detail=detail[:MAX_DETAIL], retry_after_s=max(waits, default=None),
                    key=",".join(d.key for d in outcomes.values() if d.key))
