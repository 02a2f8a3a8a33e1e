"""Package layout rules (docs/design.md, "Where things live").

Top-level names like `models` are generic, so packages are listed by hand in pyproject.toml
rather than discovered: a package missing from the list installs without its files. And the
dependency arrow points one way: `collectors` and `models` never import `service`.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The installed packages; `bench` is a development tool run from the checkout, not shipped.
TOP_LEVEL = ("collectors", "models", "service")
NO_SERVICE = ("collectors", "models")


def _listed_packages() -> list[str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    assert isinstance(packages, list) and all(isinstance(p, str) for p in packages)
    return packages


def _package_dirs() -> set[str]:
    """Dotted names of every directory under the top-level packages that has an __init__.py."""
    found: set[str] = set()
    for top in TOP_LEVEL:
        for init in (REPO / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(REPO).parts))
    return found


def test_every_package_is_listed() -> None:
    found = _package_dirs()
    assert set(TOP_LEVEL) <= found
    missing = sorted(found - set(_listed_packages()))
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_every_listed_package_exists() -> None:
    listed = _listed_packages()
    assert len(listed) == len(set(listed)), "a package is listed twice"
    absent = [p for p in listed if not (REPO.joinpath(*p.split(".")) / "__init__.py").is_file()]
    assert not absent, f"listed in pyproject.toml but no <package>/__init__.py: {absent}"


def _imported_modules(path: Path, root: Path = REPO) -> set[str]:
    """Absolute names of the modules a file imports, relative imports resolved."""
    # The package a file's relative imports start from: its directory, for modules and
    # __init__.py alike.
    package = list(path.relative_to(root).parent.parts)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            prefix = ".".join([*base, *([node.module] if node.module else [])])
            names.add(prefix)
            # `from x import y` may import the submodule x.y.
            names.update(f"{prefix}.{alias.name}" if prefix else alias.name for alias in node.names)
    return names


def _is_service(name: str) -> bool:
    return name == "service" or name.startswith("service.")


@pytest.mark.parametrize("top", NO_SERVICE)
def test_never_imports_service(top: str) -> None:
    files = sorted((REPO / top).rglob("*.py"))
    assert files, f"no Python files under {top}/"
    offenders = {
        str(f.relative_to(REPO)): sorted(n for n in _imported_modules(f) if _is_service(n))
        for f in files
    }
    offenders = {f: names for f, names in offenders.items() if names}
    assert not offenders, f"{top} must not import service: {offenders}"


@pytest.mark.parametrize("top", TOP_LEVEL)
def test_shipped_code_never_imports_bench(top: str) -> None:
    # bench/ is left out of the wheel: an import of it works in the checkout, fails installed.
    offenders = {
        str(f.relative_to(REPO)): sorted(
            n for n in _imported_modules(f) if n == "bench" or n.startswith("bench.")
        )
        for f in sorted((REPO / top).rglob("*.py"))
    }
    offenders = {f: names for f, names in offenders.items() if names}
    assert not offenders, f"{top} must not import bench (not installed): {offenders}"


def test_import_scan_resolves_every_form(tmp_path: Path) -> None:
    # Guards the scanner: a form it missed would let a service import through unnoticed.
    mod = tmp_path / "models" / "sub" / "mod.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(
        "import numpy as np\n"
        "import service.api\n"
        "from service import store\n"
        "from . import sibling\n"
        "from ..other import thing\n",
        encoding="utf-8",
    )
    names = _imported_modules(mod, root=tmp_path)
    assert {"numpy", "service.api", "service.store", "models.sub.sibling",
            "models.other.thing"} <= names
    assert sorted(n for n in names if _is_service(n)) == ["service", "service.api",
                                                          "service.store"]
    assert not _is_service("services")


# ---- inside service/ ---------------------------------------------------------------------------
# The layer order (docs/design.md, "Where things live"): a module imports only from its own
# layer or a lower one, and no set of modules imports itself round (function-level imports
# count too: hiding a cycle in a function does not remove it). One folder per row: folders share
# a row only while they import each other, so a row that no longer needs to be shared fails.
SERVICE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("service.errors",),  # the error root: a leaf every layer may raise from
    ("service.heap",),  # freed heap back to the system: a leaf
    ("service.storage",),  # the database layer: the SQLite file, shared state, sample tables
    ("service.stages",),  # the round's stages: ingest, windows, scoring, alert machine and store
    ("service.notify",),  # routing, silences, receivers, the outbox
    ("service.remediation",),  # acting on level-3 alerts
    ("service.diagnostics",),  # active tests on a node and the return-to-service gate
    ("service.tick",),  # what one tick leaves behind and the protocols it is handed to
    ("service.grafana",),  # dashboards as code
    ("service.learning",),  # models and labels learned from the ticks
    ("service.history",),  # sample and risk history: SQLite readers, InfluxDB
    ("service.cluster",),  # replicas and shards
    ("service.secret_files",),  # secret settings read from files
    ("service.settings",),  # the settings tree, composed of its owners' sections
    ("service.assembly",),  # builds the parts
    ("service.pipeline",),  # calls the stages in order
    ("service.console",),  # the web console's pages
    ("service.runtime",),  # runs a pipeline in a process: scheduler, metrics, HTTP guards
    ("service.api",),  # serves it over HTTP
    ("service.commands",),  # the command line
)


def _service_modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in (REPO / "service").rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _service_graph() -> dict[str, set[str]]:
    modules = _service_modules()
    return {name: {n for n in _imported_modules(path) if n in modules and n != name}
            for name, path in modules.items()}


def _layer(module: str) -> int:
    for i, layer in enumerate(SERVICE_LAYERS):
        if any(module == p or module.startswith(p + ".") for p in layer):
            return i
    raise AssertionError(f"{module} is in no layer of SERVICE_LAYERS: add its package")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Sets of modules that import each other round (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_service_has_no_import_cycle() -> None:
    assert not _cycles(_service_graph()), "import cycles in service/"


def test_service_imports_only_downward() -> None:
    graph = _service_graph()
    upward = {f"{a} -> {b}" for a, bs in graph.items() for b in bs
              if a != "service" and b != "service" and _layer(b) > _layer(a)}
    assert not upward, f"imports against the layer order: {sorted(upward)}"


def test_each_row_is_one_folder() -> None:
    # One floor per package: with imports only downward, no two folders can import each other.
    shared = [row for row in SERVICE_LAYERS if len(row) != 1]
    assert not shared, f"give each of these folders a row of its own, in import order: {shared}"


def test_the_upward_check_sees_an_upward_import() -> None:
    graph = {"service.stages.x": {"service.notify.y"}, "service.notify.y": {"service.stages.z"}}
    upward = [(a, b) for a, bs in graph.items() for b in bs if _layer(b) > _layer(a)]
    assert upward == [("service.stages.x", "service.notify.y")]


def test_the_cycle_check_finds_cycles_hidden_in_functions(tmp_path: Path) -> None:
    # Guards the check itself: a cycle through a function-level import, beside a clean module.
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "a.py").write_text("def f():\n    from service import b\n")
    (tmp_path / "service" / "b.py").write_text("import service.a\n")
    (tmp_path / "service" / "c.py").write_text("import service.a\n")
    graph = {f"service.{p.stem}": {n for n in _imported_modules(p, root=tmp_path)
                                   if n in ("service.a", "service.b", "service.c")}
             for p in (tmp_path / "service").glob("*.py")}
    assert _cycles(graph) == [["service.a", "service.b"]]
