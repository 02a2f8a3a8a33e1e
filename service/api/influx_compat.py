"""The two InfluxDB calls clients make before they write: `/ping` (is it up?) and, from
Telegraf's v1 `influxdb` output unless `skip_database_creation = true`, `CREATE DATABASE`
through `/query`. Every write lands in the one store, whatever database a client names, so
creating one succeeds without doing anything; other InfluxQL is not served here (read through
the /v1 API, or from InfluxDB itself)."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from service.api.state import State
from service.api.write_auth import authorize
from service.errors import BadRequest, GpuhealthError, PayloadTooLarge

router = APIRouter()
PATHS = ("/ping", "/query")

# What InfluxDB 1.x reports; clients that check it want to see the v1 API.
INFLUX_VERSION = "1.8-gpuhealth"
_HEADERS = {"X-Influxdb-Version": INFLUX_VERSION, "X-Influxdb-Build": "OSS"}
_MAX_FORM_BYTES = 65536
_CREATE_DB = re.compile(r"\s*CREATE\s+DATABASE\s+(\"(?:[^\"\\]|\\.)+\"|\w+)(\s+WITH\s[^;]*)?"
                        r"\s*;?\s*", re.IGNORECASE)


@router.get("/ping", tags=["ingest"], status_code=204, response_class=Response,
            summary="InfluxDB ping: 204 while the service runs")
@router.head("/ping", tags=["ingest"], status_code=204, response_class=Response,
             summary="InfluxDB ping: 204 while the service runs")
def ping() -> Response:
    return Response(status_code=204, headers=_HEADERS)


@router.get("/query", tags=["ingest"], summary="InfluxDB query: CREATE DATABASE only")
@router.post("/query", tags=["ingest"], summary="InfluxDB query: CREATE DATABASE only")
async def query(
    request: Request,
    st: State,
    q: Annotated[str | None, Query(description="InfluxQL: only CREATE DATABASE is served")]
    = None,
    u: Annotated[str | None, Query(description="InfluxDB v1 user (ignored)")] = None,
    p: Annotated[str | None, Query(description="InfluxDB v1 password: a write token")] = None,
) -> Response:
    try:
        if q is None:  # Telegraf posts the statement as a form body
            q = await _form_q(request)
        authorize(request, st, u, p, challenge='Basic realm="gpuhealth"')
        if not q:
            raise BadRequest("missing required parameter \"q\"")
        if _CREATE_DB.fullmatch(q) is None:
            raise BadRequest("only CREATE DATABASE is served on /query (every write lands in "
                             "one store); read through the /v1 API or from InfluxDB")
    except GpuhealthError as refused:  # answered by service.api.problems, as InfluxDB's
        refused.headers.update(_HEADERS)
        raise
    return JSONResponse({"results": [{"statement_id": 0}]}, headers=_HEADERS)


async def _form_q(request: Request) -> str | None:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            raise PayloadTooLarge(f"query body exceeds {_MAX_FORM_BYTES} bytes")
    try:
        form = parse_qs(body.decode(), max_num_fields=16)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"query body is not a form: {exc}") from None
    return form.get("q", [None])[0]

