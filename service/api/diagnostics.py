"""Active diagnostics over HTTP: a node's runs (newest first) with each suite's result, the
checks that failed and their figures, and its repeat-offender record (service.diagnostics.
offenders: how often it came back from a release and failed again, and whether it needs its
hardware replaced); the fleet's repeat offenders; and the operator's word that a flagged
node's hardware was replaced, which clears the flag (operate, audited, idempotent)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from service.api.auth import Reader
from service.api.guards import IdempotentOperate
from service.api.idempotency import MUTATING_RESPONSES
from service.api.paging import PageDep
from service.api.problems import READ_ERRORS, problem_responses
from service.api.state import Running, State
from service.api.timefmt import stamp_fields
from service.api.views import node_detail
from service.diagnostics.gate import Diagnostics
from service.diagnostics.offenders import Offenders, Record
from service.errors import NotFound, ServiceUnavailable, Unprocessable

router = APIRouter()
_OFF = problem_responses(503, description="Diagnostics (or their repeat-offender record) are "
                         "off")


class RunIn(BaseModel):
    suite: str = Field(min_length=1, max_length=63, description="a suite of the diagnostics "
                       "settings (diagnostics.suites)")


class ReplacedIn(BaseModel):
    reason: str = Field(min_length=1, max_length=500, description=(
        "what was replaced (e.g. the GPU board's new serial, the ticket)"))


def _diagnostics(st: Running) -> Diagnostics:
    diag = st.pipeline.diagnostics
    if diag is None:
        raise ServiceUnavailable("diagnostics are off (diagnostics.enabled: false, or "
                                 "remediation.mode: off)")
    return diag


def _offenders(st: Running) -> Offenders:
    got = _diagnostics(st).offenders
    if got is None:
        raise ServiceUnavailable("repeat offenders are not tracked in this service")
    return got


def _record(rec: Record, off: Offenders) -> dict[str, Any]:
    d = rec.as_dict(off.settings)
    d["returns"] = [stamp_fields(x) for x in d["returns"]]
    d["gpus"] = [stamp_fields(g) for g in d["gpus"]]
    if d["replaced"] is not None:
        d["replaced"] = stamp_fields(d["replaced"], extra=("at",))
    return stamp_fields(d)


@router.get("/v1/nodes/{node}/diagnostics", tags=["remediation"],
            responses=problem_responses(404, description="Unknown node, never tested")
            | _OFF | READ_ERRORS,
            summary="A node's diagnostic runs (newest first): suite, why it ran, pass, fail "
                    "with the failing checks and figures, or error with why; and its repeat-"
                    "offender record")
def node_diagnostics(st: State, who: Reader, node: str,
                     limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
    diag = _diagnostics(st)
    runs = diag.runs.for_node(node, limit)
    off = diag.offenders
    if not runs and node_detail(st.pipeline, node) is None and (
            off is None or not off.known(node)):
        raise NotFound(f"node {node!r} is not known: no sample and no run has named it")
    return {"node": node, "site": diag.site.name,
            "runs": [stamp_fields(r.as_dict(), extra=("started_at", "finished_at"))
                     for r in runs],
            "offender": None if off is None else _record(off.of(node, st.clock()), off)}


@router.get("/v1/diagnostics/offenders", tags=["remediation"],
            responses=problem_responses(400) | _OFF | READ_ERRORS,
            summary="Repeat offenders: nodes that came back from a release and failed again, "
                    "those flagged for hardware replacement first, then the newest return")
def list_offenders(st: State, who: Reader, page: PageDep,
                   flagged: bool | None = Query(None, description=(
                       "true: only nodes that need their hardware replaced; false: only "
                       "the others"))) -> dict[str, Any]:
    off = _offenders(st)
    found = [r for r in off.fleet(st.clock()) if flagged is None or r.flagged == flagged]
    after = page.after("offenders", (int, float, str))
    start = 0
    if after is not None:
        cut = (int(after[0]), -float(after[1]), str(after[2]))
        start = next((i for i, r in enumerate(found) if _key(r) > cut), len(found))
    rows, next_cursor = page.slice("offenders", found, _cursor, start)
    return {"limit": page.limit, "next_cursor": next_cursor,
            "offenders": [_record(r, off) for r in rows]}


def _key(r: Record) -> tuple[int, float, str]:
    """The listing's order: flagged first, then the newest return, then the node."""
    return (0 if r.flagged else 1, -r.last_failed_at, r.node)


def _cursor(r: Record) -> tuple[int, float, str]:
    return (0 if r.flagged else 1, r.last_failed_at, r.node)


@router.post("/v1/nodes/{node}/replaced", tags=["remediation"],
             responses=MUTATING_RESPONSES | _OFF
             | problem_responses(404, description="Unknown node"),
             summary="Say a node's hardware was replaced: its repeat-offender history no "
                     "longer counts and its gate tests it again (audited)")
async def node_replaced(st: State, node: str, body: ReplacedIn,
                        idem: IdempotentOperate) -> Response:
    def run() -> dict[str, Any]:
        off = _offenders(st)
        if not off.known(node) and node_detail(st.pipeline, node) is None:
            raise NotFound(f"node {node!r} is not known: no sample, action or run names it")
        now = st.clock()
        was = off.of(node, now)
        rec = off.replaced(node, idem.principal.name, body.reason, now)
        return {**_record(rec, off), "was_flagged": was.flagged,
                "was_why": was.why or None}
    return await idem.run(run)


@router.post("/v1/nodes/{node}/diagnostics", tags=["remediation"], status_code=202,
             responses=MUTATING_RESPONSES | _OFF
             | problem_responses(404, description="Unknown node")
             | problem_responses(409, description="A run is in flight on the node")
             | problem_responses(422, description="Unknown suite"),
             summary="Run a suite on a node now (in the background; never while a job runs "
                     "there: the run then ends as an error saying so); audited")
async def run_diagnostic(st: State, node: str, body: RunIn,
                         idem: IdempotentOperate) -> Response:
    def run() -> dict[str, Any]:
        diag = _diagnostics(st)
        if body.suite not in diag.settings.suites:
            raise Unprocessable(f"unknown suite {body.suite!r} (known: "
                                f"{', '.join(sorted(diag.settings.suites))})")
        if node_detail(st.pipeline, node) is None and not diag.runs.for_node(node, 1):
            raise NotFound(f"node {node!r} is not known: no sample and no run has named it")
        # ActionConflict (a run in flight) answers 409 itself.
        started = diag.start_manual(node, body.suite, idem.principal.name, st.clock())
        return {"node": node, "suite": body.suite, "detail": started}
    return await idem.run(run, status_code=202)
