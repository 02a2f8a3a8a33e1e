"""Active diagnostics over HTTP: a node's runs (newest first) with each suite's result, the
checks that failed and their figures, and what the gate is waiting for."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from service.api.auth import Reader
from service.api.problems import READ_ERRORS, problem_responses
from service.api.state import State
from service.api.timefmt import stamp_fields
from service.api.views import node_detail
from service.errors import NotFound, ServiceUnavailable

router = APIRouter()


@router.get("/v1/nodes/{node}/diagnostics", tags=["remediation"],
            responses=problem_responses(404, description="Unknown node, never tested")
            | problem_responses(503, description="Diagnostics are off") | READ_ERRORS,
            summary="A node's diagnostic runs (newest first): suite, why it ran, pass, fail "
                    "with the failing checks and figures, or error with why")
def node_diagnostics(st: State, who: Reader, node: str,
                     limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
    diag = st.pipeline.diagnostics
    if diag is None:
        raise ServiceUnavailable("diagnostics are off (diagnostics.enabled: false, or "
                                 "remediation.mode: off)")
    runs = diag.runs.for_node(node, limit)
    if not runs and node_detail(st.pipeline, node) is None:
        raise NotFound(f"node {node!r} is not known: no sample and no run has named it")
    return {"node": node, "site": diag.site.name,
            "runs": [stamp_fields(r.as_dict(), extra=("started_at", "finished_at"))
                     for r in runs]}
