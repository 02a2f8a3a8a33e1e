"""The two InfluxDB calls clients make before they write: `/ping` (is it up?) and, from
Telegraf's v1 `influxdb` output unless `skip_database_creation = true`, `CREATE DATABASE`
through `/query`. Every write lands in the one store, whatever database a client names, so
creating one succeeds without doing anything; other InfluxQL is not served here (read through
the /v1 API, or from InfluxDB itself)."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from service.api.state import State
from service.api.write_auth import Refused, authorize

router = APIRouter()

# What InfluxDB 1.x reports; clients that check it want to see the v1 API.
INFLUX_VERSION = "1.8-gpuhealth"
_HEADERS = {"X-Influxdb-Version": INFLUX_VERSION, "X-Influxdb-Build": "OSS"}
_MAX_FORM_BYTES = 65536
_CREATE_DB = re.compile(r"\s*CREATE\s+DATABASE\s+(\"(?:[^\"\\]|\\.)+\"|\w+)(\s+WITH\s[^;]*)?"
                        r"\s*;?\s*", re.IGNORECASE)


@router.get("/ping", tags=["ingest"], status_code=204, response_class=Response,
            summary="InfluxDB ping: 204 while the service runs")
@router.head("/ping", tags=["ingest"], status_code=204, response_class=Response,
             include_in_schema=False)
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
        authorize(request, st, u, p)
    except Refused as r:
        return _error(r.status, r.message)
    if not q:
        return _error(400, "missing required parameter \"q\"")
    if _CREATE_DB.fullmatch(q) is None:
        return _error(400, "only CREATE DATABASE is served on /query (every write lands in "
                           "one store); read through the /v1 API or from InfluxDB")
    return JSONResponse({"results": [{"statement_id": 0}]}, headers=_HEADERS)


async def _form_q(request: Request) -> str | None:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            raise Refused(413, f"query body exceeds {_MAX_FORM_BYTES} bytes")
    try:
        form = parse_qs(body.decode(), max_num_fields=16)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"query body is not a form: {exc}") from None
    return form.get("q", [None])[0]


def _error(status: int, message: str) -> Response:
    headers: dict[str, Any] = dict(_HEADERS)
    if status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="gpuhealth"'
    return JSONResponse({"error": message}, status_code=status, headers=headers)
