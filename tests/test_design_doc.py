"""docs/design.md's "Where things live" and "How to add ..." sections against the code: every
path they name exists, every module of collectors/, models/ and service/ is named, and the
service layer order they give is the one tests/test_layout.py enforces."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layout import SERVICE_LAYERS

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "design.md"
LISTED = ("collectors", "models", "service")
_PATH = re.compile(r"`((?:collectors|models|service|tests)/[\w./-]*)`")
_LAYER = re.compile(r"^\d+\. (`service\.[\w.]+`(?:, `service\.[\w.]+`)*)", re.MULTILINE)


def _sections(text: str) -> str:
    """The text of the level-2 sections "Where things live" and "How to add ...", each up to
    the next level-2 heading."""
    parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
    return "".join(p for p in parts
                   if p.startswith("## Where things live") or p.startswith("## How to add"))


def _named_paths(text: str) -> set[str]:
    return set(_PATH.findall(_sections(text)))


def _modules(top: str) -> dict[str, str]:
    """Each module of a top-level package, as the doc must name it: a package by its directory
    (`service/api/`), any other module by its file."""
    out: dict[str, str] = {}
    for path in sorted((REPO / top).rglob("*.py")):
        rel = path.relative_to(REPO)
        out[str(rel)] = (f"{rel.parent.as_posix()}/" if path.name == "__init__.py"
                         else rel.as_posix())
    return out


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_sections_are_there() -> None:
    named = _named_paths(_doc())
    assert "service/pipeline.py" in named and "collectors/registry.py" in named, \
        "docs/design.md lost its 'Where things live' or 'How to add' sections"
    for heading in ("a source", "a detector", "a notification receiver", "a remediation hook"):
        assert f"\n## How to add {heading}\n" in _doc(), f"no 'How to add {heading}' section"


def test_every_named_path_exists() -> None:
    missing = sorted(p for p in _named_paths(_doc()) if not (REPO / p).exists())
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


def test_every_module_is_named() -> None:
    named = _named_paths(_doc())
    unnamed = sorted(doc_name for top in LISTED for doc_name in _modules(top).values()
                     if top + "/" != doc_name and doc_name not in named)
    assert not unnamed, f"add to 'Where things live' in docs/design.md: {unnamed}"


def test_the_layer_order_is_the_enforced_one() -> None:
    layers = tuple(tuple(re.findall(r"`([\w.]+)`", m)) for m in _LAYER.findall(_sections(_doc())))
    assert layers == SERVICE_LAYERS, (
        "the layer order in docs/design.md differs from SERVICE_LAYERS in tests/test_layout.py")


def test_the_checks_see_a_wrong_doc() -> None:
    # Guards the parsing: a path outside the sections is not checked, one inside is, and a
    # module the doc leaves out is found.
    doc = ("# Design\n\n## Where things live\n\n- `service/nope.py`: gone.\n"
           "1. `service.tick`: the parts\n\n"
           "## How to add a source\n\n`collectors/registry.py`\n\n"
           "## Performance\n\n`service/elsewhere.py`\n")
    assert _named_paths(doc) == {"service/nope.py", "collectors/registry.py"}
    assert _LAYER.findall(_sections(doc)) == ["`service.tick`"]
    assert "service/pipeline.py" not in _named_paths(doc)
