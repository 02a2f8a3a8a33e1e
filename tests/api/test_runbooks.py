"""Runbooks: the registry covers every alertname gpuhealth raises, `GET /v1/runbooks/{name}`
serves it through the real app (HTML, or markdown on request; no token asked even where reads
need one; an unknown name a 404 problem, a name that is no alertname refused before any
lookup) and docs/runbooks.md is the registry's text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.runbooks import _html
from service.commands import runbooks_doc
from service.errors import PROBLEM_JSON
from service.notify import runbooks
from service.notify.runbooks import RUNBOOKS, Runbook, markdown
from service.settings import Settings
from service.stages.alert_store import ALERTNAMES
from service.stages.fleet_alerts import DERIVED

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    s = settings.model_copy(update={"api": type(settings.api)(read_requires_token=True)})
    with TestClient(create_app(s, schedule=False)) as c:
        yield c


def test_every_alertname_gpuhealth_raises_has_a_runbook() -> None:
    for name in {*ALERTNAMES.values(), *DERIVED, "ModelRetraining"}:
        b = RUNBOOKS[name]
        assert b.source == "gpuhealth" and b.means and b.check and b.act, name


def test_a_runbook_is_served_without_a_token(client: TestClient) -> None:
    assert client.get("/v1/alerts").status_code == 401  # reads need one here
    r = client.get("/v1/runbooks/FleetStorm", headers={"Accept": "text/html"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<h1>FleetStorm</h1>" in r.text and "<h2>Check</h2>" in r.text
    assert "<code>POST /v1/breaker/reset</code>" in r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]
    r = client.get("/v1/runbooks/NodeNoData", headers={"Accept": "text/markdown"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    assert r.text == markdown(RUNBOOKS["NodeNoData"])


def test_the_index_links_every_runbook(client: TestClient) -> None:
    page = client.get("/v1/runbooks").text
    for name in RUNBOOKS:
        assert f'<a href="runbooks/{name}">{name}</a>' in page
    md = client.get("/v1/runbooks", headers={"Accept": "text/markdown"}).text
    assert md.count("](runbooks/") == len(RUNBOOKS)


def test_unknown_and_invalid_names_are_problems(client: TestClient) -> None:
    r = client.get("/v1/runbooks/NoSuchAlert")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM_JSON
    assert r.json()["type"] == "/problems/not-found" and "NoSuchAlert" in r.json()["detail"]
    for bad in ("Fleet%20Storm", "%3Cscript%3E", "9Lives", "A" * 65, "a-b"):
        r = client.get(f"/v1/runbooks/{bad}")
        # A JSON problem, as every refused parameter: never an HTML page that echoes it.
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM_JSON, bad
    assert runbooks.get("<script>") is None and runbooks.get("FleetStorm") is not None


def test_the_html_escapes_its_text() -> None:
    b = Runbook("X", "gpuhealth", "<i>", "a <b>bold</b> claim, `code & more`", ("c",), ("d",))
    page = _html(b)
    assert "<b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<code>code &amp; more</code>" in page and "&lt;i&gt;" in page


def test_the_registry_refuses_duplicates_and_bad_names() -> None:
    b = Runbook("X", "gpuhealth", "none", "m", ("c",), ("d",))
    with pytest.raises(ValueError, match="two runbooks"):
        runbooks._registry([b, b])
    with pytest.raises(ValueError, match="not an alertname"):
        runbooks._registry([Runbook("x y", "gpuhealth", "none", "m", ("c",), ("d",))])


def test_runbook_links_are_the_external_url_and_the_name() -> None:
    assert runbooks.url("https://gh.example/", "FleetStorm") == \
        "https://gh.example/v1/runbooks/FleetStorm"


def test_runbooks_md_is_the_registry() -> None:
    path = REPO / "docs" / "runbooks.md"
    assert path.read_text(encoding="utf-8") == runbooks_doc.render_runbooks_md(), (
        "docs/runbooks.md is stale: run `python -m service.commands.runbooks_doc`")
    text = path.read_text(encoding="utf-8")
    for name in RUNBOOKS:
        assert text.count(f"\n## {name}\n") == 1, name


def test_the_check_flags_a_stale_page(tmp_path: Path) -> None:
    out = tmp_path / "runbooks.md"
    assert runbooks_doc.main(["--check", "--output", str(out)]) == 1  # missing
    assert runbooks_doc.main(["--output", str(out)]) == 0
    assert runbooks_doc.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    assert runbooks_doc.main(["--check", "--output", str(out)]) == 1
