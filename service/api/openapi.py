"""The OpenAPI document as the live API answers: FastAPI's, with every error response filed
as the problem detail the service really sends (service.api.problems), and the snapshot
committed under docs/ so that an API change shows in review.

Regenerate the snapshot after changing the API:

    python -m service.api.openapi_snapshot docs/openapi.json
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.errors import PROBLEM_JSON

PROBLEM_REF = "#/components/schemas/Problem"
WRITE_REF = "#/components/schemas/WriteError"
_FASTAPI_422 = "#/components/schemas/HTTPValidationError"
SNAPSHOT = Path("docs") / "openapi.json"
REGENERATE = f"python -m service.api.openapi_snapshot {SNAPSHOT}"


def install(app: FastAPI, influxdb_paths: Iterable[str]) -> None:
    """Serve the corrected document at /openapi.json (built once, on first request)."""
    influx = frozenset(influxdb_paths)

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)
            app.openapi_schema = problem_details(doc, influx)
        return app.openapi_schema

    setattr(app, "openapi", build)  # noqa: B010  (FastAPI's documented override)


def problem_details(doc: dict[str, Any], skip_paths: frozenset[str]) -> dict[str, Any]:
    """Every 4xx/5xx response as `application/problem+json` with the Problem schema, or on
    `skip_paths` (the InfluxDB endpoints, which answer InfluxDB's way) as `application/json`
    with WriteError; FastAPI's HTTPValidationError, a shape the service never sends, goes."""
    for path, item in doc.get("paths", {}).items():
        influx = path in skip_paths
        for op in item.values():
            for status, resp in op.get("responses", {}).items():
                if not status.isdigit() or int(status) < 400 or not _is_problem(resp):
                    continue
                if influx:  # InfluxDB's `error` beside the problem members, as JSON
                    resp["content"] = {"application/json": {"schema": {"$ref": WRITE_REF}}}
                else:
                    resp["content"] = {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}}}
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # the second used by the first
        if f'"#/components/schemas/{name}"' not in json.dumps([doc.get("paths"), schemas]):
            schemas.pop(name, None)
    return doc


def _is_problem(resp: dict[str, Any]) -> bool:
    """No body declared, FastAPI's 422 shape, or Problem under application/json."""
    content = resp.get("content")
    if not content:
        return True
    refs = {c.get("schema", {}).get("$ref") for c in content.values()}
    return refs <= {_FASTAPI_422, PROBLEM_REF, WRITE_REF}


def render(app: FastAPI) -> str:
    """The document as the snapshot holds it: sorted keys, two-space indent, newline."""
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"
