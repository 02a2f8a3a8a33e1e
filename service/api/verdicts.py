"""Verdicts and labels: `POST /v1/alerts/{id}/verdict` (operate scope), an alert's verdicts,
the labels learned from the fleet (`GET /v1/labels`), and the page behind a message's signed
verdict link (`/verdict/{id}`), where the link is the credential and no token is asked."""

from __future__ import annotations

import html
import logging
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field
from starlette.requests import ClientDisconnect

from collectors.labels import FailureMode
from service.api.auth import Reader
from service.api.bounded import AlertId
from service.api.guards import IdempotentOperate
from service.api.idempotency import MUTATING_RESPONSES
from service.api.paging import PageDep
from service.api.problems import READ_ERRORS, problem_responses
from service.api.state import Running, State
from service.api.timefmt import TIME_DOC, TimeIn, stamp_fields
from service.errors import NotFound, Unprocessable
from service.learning.verdicts import VERDICTS, Verdict, VerdictName, VerdictRefused
from service.stages.alert_store import Alert
from service.stages.label_store import StoredLabel

router = APIRouter(responses=READ_ERRORS)
_UNKNOWN = problem_responses(404, description="No such alert")
FORM_MAX_BYTES = 4096  # a verdict form is a few short fields
log = logging.getLogger(__name__)


class VerdictIn(BaseModel):
    verdict: VerdictName
    mode: FailureMode | None = Field(default=None, description=(
        "`failed` only: the failure mode; defaults to the mode of the alert's own failure label"))
    failed_at: TimeIn | None = Field(default=None, description=(
        TIME_DOC + "; `failed` only: when the device failed (default: the alert's failure "
        "label, else its end, else now)"))
    comment: str = Field(default="", max_length=1000)


def verdict_out(v: Verdict) -> dict[str, Any]:
    return stamp_fields(v.as_dict(), extra=("at",))


def label_out(lb: StoredLabel) -> dict[str, Any]:
    return stamp_fields(lb.as_dict(), extra=("time", "end_time"))


def _give(st: Running, alert_id: int, verdict: str, *, actor: str, via: str,
          mode: str | None = None, failed_at: float | None = None,
          comment: str = "", link: str | None = None) -> dict[str, Any]:
    try:
        v, labels = st.pipeline.verdicts.give(alert_id, verdict, actor=actor, via=via,
                                              now=st.clock(), mode=mode, failed_at=failed_at,
                                              comment=comment, link=link)
    except KeyError:
        raise NotFound(f"alert {alert_id} does not exist") from None
    except VerdictRefused as e:
        raise Unprocessable(str(e)) from None
    return {"verdict": verdict_out(v), "labels": [label_out(lb) for lb in labels]}


@router.post("/v1/alerts/{alert_id}/verdict", tags=["alerting"],
             responses=MUTATING_RESPONSES | _UNKNOWN,
             summary="Say what an alert was: failed (with mode and time), false_alarm, "
                     "maintenance or unknown; the newest verdict's labels replace the last's")
async def give_verdict(st: State, alert_id: AlertId, body: VerdictIn,
                       idem: IdempotentOperate) -> Response:
    def run() -> dict[str, Any]:
        return _give(st, alert_id, body.verdict, actor=idem.principal.name, via="api",
                     mode=None if body.mode is None else str(body.mode),
                     failed_at=body.failed_at, comment=body.comment)

    return await idem.run(run)


@router.get("/v1/alerts/{alert_id}/verdicts", tags=["alerting"], responses=_UNKNOWN,
            summary="Every verdict given on an alert, oldest first (the newest one counts)")
def list_verdicts(st: State, who: Reader, alert_id: AlertId) -> dict[str, Any]:
    if st.pipeline.alerts.get(alert_id) is None:
        raise NotFound(f"alert {alert_id} does not exist")
    return {"verdicts": [verdict_out(v) for v in st.pipeline.verdicts.history(alert_id)]}


@router.get("/v1/labels", tags=["alerting"], responses=problem_responses(400),
            summary="Labels learned from the fleet (hard failures, repairs, verdicts), "
                    "oldest first")
def list_labels(
    st: State, who: Reader, page: PageDep,
    since: Annotated[TimeIn | None, Query(description=TIME_DOC)] = None,
    until: Annotated[TimeIn | None, Query(description=TIME_DOC)] = None,
    kind: Annotated[str | None, Query(pattern="^(failure|benign|repair)$")] = None,
    node: str | None = None, entity: str | None = None,
    overruled: Annotated[bool, Query(description=(
        "include auto failures of alerts an operator called a false alarm or maintenance"))]
    = True,
) -> dict[str, Any]:
    after = page.after("labels", (float, int))
    found = st.pipeline.labels.find(
        since=since, until=until, kind=kind, node=node, entity=entity, overruled=overruled,
        after=None if after is None else (float(after[0]), int(after[1])),
        limit=page.limit + 1)
    rows, next_cursor = page.slice("labels", found, lambda lb: (lb.time, lb.id), 0)
    return {"limit": page.limit, "next_cursor": next_cursor,
            "labels": [label_out(lb) for lb in rows]}


# -- the signed link's page ---------------------------------------------------------------------

def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    doc = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
           "content=\"width=device-width\"><meta name=\"robots\" content=\"noindex\">"
           f"<title>{html.escape(title)}</title></head><body style=\"font-family: sans-serif; "
           f"max-width: 40em\"><h2>{html.escape(title)}</h2>{body}</body></html>")
    return HTMLResponse(doc, status_code=status, headers={
        "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                   "form-action 'self'"})


def _linked(st: Running, alert_id: int, exp: str | None, by: str | None,
            sig: str | None) -> Alert | HTMLResponse:
    links = st.pipeline.settings.notify.verdict_links()
    if links is None:
        return _page("Verdict links are off", "<p>This service gives no verdict links "
                     "(notify.verdict_link_secret is not set).</p>", 404)
    why = links.check(alert_id, exp, by, sig, st.clock())
    if why is not None:
        return _page("This link does not work", f"<p>{html.escape(why)}.</p>", 403)
    alert = st.pipeline.alerts.get(alert_id)
    if alert is None:
        return _page("No such alert", f"<p>Alert {alert_id} does not exist.</p>", 404)
    return alert


def _used(st: Running, sig: str) -> HTMLResponse | None:
    """The page for a link that gave its one verdict already, or None while it has not."""
    used = st.pipeline.verdicts.link_used(sig)
    if used is None:
        return None
    return _page("This link was used", f"<p>It recorded <b>{html.escape(used.verdict)}</b> "
                 f"by {html.escape(used.actor)}; a link records one verdict. A new verdict "
                 "goes through the API or the console.</p>", 409)


def _form(alert: Alert, exp: str, by: str, sig: str) -> str:
    e = html.escape
    modes = "".join(f'<option value="{m.value}">{m.value}</option>' for m in FailureMode)
    buttons = "".join(
        f'<button name="verdict" value="{v}" style="margin: 0.2em">{v.replace("_", " ")}</button>'
        for v in VERDICTS)
    return (f"<p>{e(alert.name)} on <b>{e(alert.entity)}</b> (node {e(alert.node)}), peak level "
            f"{alert.peak_level}, {e(alert.state)}.</p>"
            f'<form method="post"><input type="hidden" name="exp" value="{e(exp)}">'
            f'<input type="hidden" name="by" value="{e(by)}">'
            f'<input type="hidden" name="sig" value="{e(sig)}">'
            f'<p><label>Mode, if it failed: <select name="mode"><option value="">'
            f"(the alert's own)</option>{modes}</select></label></p>"
            '<p><label>Comment: <input name="comment" maxlength="1000" size="40"></label></p>'
            f"<p>Recorded as given by link:{e(by)}; the link records one verdict.</p>"
            f"<p>{buttons}</p></form>")


@router.get("/verdict/{alert_id}", include_in_schema=False)
def verdict_page(st: State, alert_id: AlertId, exp: str | None = None, by: str | None = None,
                 sig: str | None = None) -> Response:
    got = _linked(st, alert_id, exp, by, sig)
    if isinstance(got, Response):
        return got
    used = _used(st, sig or "")
    if used is not None:
        return used
    latest = st.pipeline.verdicts.latest(alert_id)
    said = ("" if latest is None else
            f"<p>Verdict so far: <b>{html.escape(latest.verdict)}</b> by "
            f"{html.escape(latest.actor)}.</p>")
    return _page(f"What was alert {alert_id}?", said + _form(got, exp or "", by or "", sig or ""))


@router.post("/verdict/{alert_id}", include_in_schema=False)
async def verdict_form(st: State, alert_id: AlertId, request: Request) -> Response:
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_MAX_BYTES:
                return _page("Form too large", "<p>The form is larger than a verdict.</p>", 413)
    except ClientDisconnect:
        # The browser went away mid-form (a closed tab, a lost network): nothing was recorded
        # and nobody is left to answer; not a fault of the service.
        log.info("verdict form for alert %d: the client disconnected before sending it",
                 alert_id)
        return Response(status_code=400)
    try:
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), max_num_fields=8).items()}
    except (UnicodeDecodeError, ValueError):
        return _page("Bad form", "<p>The form could not be read.</p>", 400)
    exp, by, sig = fields.get("exp"), fields.get("by"), fields.get("sig")
    got = _linked(st, alert_id, exp, by, sig)
    if isinstance(got, Response):
        return got
    assert by is not None and sig is not None  # _linked checked them
    verdict = fields.get("verdict", "")
    mode = fields.get("mode") or None
    try:
        # The actor is the receiver the link was made out to, inside its signature: a
        # visitor cannot name one (a `name` field, as earlier forms sent, is ignored).
        out = _give(st, alert_id, verdict, actor=f"link:{by}", via="link",
                    mode=mode if verdict == "failed" else None,
                    comment=fields.get("comment", "")[:1000], link=sig)
    except Unprocessable as e:
        used = _used(st, sig)
        if used is not None:
            return used
        return _page("Verdict not taken", f"<p>{html.escape(str(e))}</p>"
                     + _form(got, exp or "", by, sig), 422)
    n = len(out["labels"])
    return _page(f"Alert {alert_id}: {verdict.replace('_', ' ')}",
                 f"<p>Thank you: recorded, with {n} label{'s' * (n != 1)} for training.</p>")
