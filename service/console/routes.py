"""Serving the console and the API docs from the service itself: no CDN, so both work on an
air-gapped cluster. The console is one HTML shell whose script reads the JSON API; the docs
are Swagger UI from the `fastapi-offline` package's bundled assets (its ReDoc is left out: it
fetches its logo from a CDN)."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
CONSOLE_ASSETS = "/console/assets"
DOCS_ASSETS = "/docs/assets"


def _docs_assets() -> Path:
    """Swagger UI's dist, as the fastapi-offline package ships it."""
    return Path(str(resources.files("fastapi_offline") / "static"))


def install(app: FastAPI) -> None:
    """Mount the console at `/` and the docs at `/docs`. The app is built with
    `docs_url=None, redoc_url=None` so FastAPI's CDN-backed pages never answer."""
    app.mount(CONSOLE_ASSETS, StaticFiles(directory=STATIC), name="console-assets")
    app.mount(DOCS_ASSETS, StaticFiles(directory=_docs_assets()), name="docs-assets")

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        # Revalidated on every load, so an upgraded service never runs yesterday's script.
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/console", include_in_schema=False)
    def console_alias() -> RedirectResponse:
        return RedirectResponse("/")

    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}", title=f"{app.title} API",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{CONSOLE_ASSETS}/favicon.svg",
            swagger_ui_parameters={"persistAuthorization": False})
