"""`GET /v1/runbooks/{alertname}`: what an alert means, what to check and what to do
(service.notify.runbooks), the page every alert's `runbook_url` opens; `GET /v1/runbooks`
lists them. HTML for a browser; markdown for a client that asks for `text/markdown`.

No token is asked, even with `api.read_requires_token`: the link is followed from a page by a
person who holds none, and the text is the docs/runbooks.md shipped with the service (no fleet
state, nothing of the request echoed but a validated name)."""

from __future__ import annotations

import html
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response

from service.api.problems import problem_responses
from service.errors import NotFound
from service.notify.runbooks import NAME, RUNBOOKS, Runbook, get, markdown

router = APIRouter()
MARKDOWN = "text/markdown; charset=utf-8"
_CODE = re.compile(r"`([^`]+)`")
_TEXT: dict[int | str, dict[str, Any]] = {200: {
    "description": "HTML, or markdown when `Accept` asks for `text/markdown`",
    "content": {"text/html": {"schema": {"type": "string"}},
                "text/markdown": {"schema": {"type": "string"}}}}}
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}


def _wants_markdown(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/markdown" in accept and "text/html" not in accept


def _inline(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


def _page(title: str, body: str) -> HTMLResponse:
    doc = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
           f"content=\"width=device-width\"><title>{html.escape(title)}</title></head>"
           "<body style=\"font-family: sans-serif; max-width: 48em; margin: 2em auto\">"
           f"{body}</body></html>")
    return HTMLResponse(doc, headers=_HEADERS)


def _html(b: Runbook) -> str:
    raised = ("gpuhealth's receivers" if b.source == "gpuhealth"
              else "the Prometheus rules (dashboards/prometheus/rules.yml)")
    items = "".join(f"<li>{_inline(c)}</li>" for c in b.check)
    acts = "".join(f"<li>{_inline(a)}</li>" for a in b.act)
    return (f"<h1>{html.escape(b.name)}</h1><p>Raised by {html.escape(raised)}; severity "
            f"{html.escape(b.severity)}.</p><p>{_inline(b.means)}</p><h2>Check</h2><ul>{items}"
            f"</ul><h2>Do</h2><ul>{acts}</ul><p><a href=\"../runbooks\">Every runbook</a></p>")


@router.get("/v1/runbooks", tags=["alerting"], response_class=HTMLResponse, responses=_TEXT,
            summary="Every runbook by alertname (HTML, or markdown on `Accept: text/markdown`)")
def list_runbooks(request: Request) -> Response:
    names = sorted(RUNBOOKS)
    if _wants_markdown(request):
        text = "# Runbooks\n\n" + "".join(f"- [{n}](runbooks/{n})\n" for n in names)
        return Response(text, media_type=MARKDOWN, headers=_HEADERS)
    items = "".join(f"<li><a href=\"runbooks/{n}\">{n}</a>: {html.escape(RUNBOOKS[n].source)}"
                    "</li>" for n in names)
    return _page("gpuhealth runbooks", f"<h1>Runbooks</h1><ul>{items}</ul>")


@router.get("/v1/runbooks/{alertname}", tags=["alerting"], response_class=HTMLResponse,
            responses=_TEXT | problem_responses(404, description="No runbook of that name"),
            summary="What an alert means, what to check and what to do (its `runbook_url`)")
def read_runbook(request: Request, alertname: Annotated[str, Path(
        pattern=f"^{NAME.pattern}$", description="The alert's `alertname` label")]) -> Response:
    b = get(alertname)
    if b is None:
        raise NotFound(f"no runbook for {alertname}; GET /v1/runbooks lists them")
    if _wants_markdown(request):
        return Response(markdown(b), media_type=MARKDOWN, headers=_HEADERS)
    return _page(f"{b.name}: gpuhealth runbook", _html(b))
