"""The node agent's own modules run on Python 3.9+ (issue 33: Ubuntu 22.04 and DGX OS 6 ship
3.10); the server keeps 3.11. Only 3.11 installs on these machines, so the check is static:
vermin (pinned in requirements-dev.txt) over the agent's import closure (bench.agent_closure),
plus what vermin cannot tell (an `X | Y` union evaluated at run time). Then the agent runs one
round on the 3.9 stand-ins of collectors.compat, and the server's commands refuse below 3.11."""

from __future__ import annotations

import ast
import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.agent_closure import REPO, closure, files
from bench.agent_node import AGENT_ONLY, fake_nvidia_smi
from collectors.compat import StrEnum, zip_strict

CLOSURE = files(closure())


def test_the_closure_is_the_collectors_and_the_agent_commands() -> None:
    names = {str(f.relative_to(REPO)) for f in CLOSURE}
    assert {"collectors/agent/loop.py", "collectors/nvidia_smi/collector.py",
            "service/commands/agent.py", "service/commands/cli.py"} <= names
    # the server stays out: it may use 3.11 freely
    assert not [n for n in names if n.startswith(("service/api", "service/settings", "models"))]


def test_vermin_finds_nothing_newer_than_python_3_9() -> None:
    pytest.importorskip("vermin", reason="vermin is not installed (pip install -r "
                                         "requirements-dev.txt pins it)")
    # No --feature union-types: its heuristic flags annotations under `from __future__ import
    # annotations`, which are never evaluated; the test below checks the unions that are.
    # vermin has no __main__: its console script's function, in this interpreter
    res = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())",
                          "-t=3.9-", "--violations",
                          "--no-tips", *map(str, CLOSURE)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


_TYPE_NAMES = {n for n, v in vars(builtins).items() if isinstance(v, type)}


def _is_type(node: ast.expr) -> bool:
    """What only a type expression looks like: None, a built-in type's name, a subscripted
    built-in or capitalised name (`list[int]`, `Mapping[str, str]`)."""
    if isinstance(node, ast.Subscript):
        node = node.value
        return ((isinstance(node, ast.Name) and (node.id in _TYPE_NAMES or node.id[0].isupper()))
                or (isinstance(node, ast.Attribute) and node.attr[0].isupper()))
    return ((isinstance(node, ast.Constant) and node.value is None)
            or (isinstance(node, ast.Name) and node.id in _TYPE_NAMES))


def _runtime_unions(tree: ast.Module) -> list[int]:
    """Lines of `X | Y` unions Python 3.9 would evaluate: outside annotations when the module
    defers them (`from __future__ import annotations`), everywhere otherwise; `if
    TYPE_CHECKING:` blocks never run."""
    deferred = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                   and any(a.name == "annotations" for a in n.names) for n in tree.body)
    skip: set[int] = set()
    for node in ast.walk(tree):
        notes: list[ast.expr | None] = []
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for s in node.body for n in ast.walk(s))
        if deferred and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            notes += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs,
                                              *(v for v in (a.vararg, a.kwarg) if v))]
            notes.append(node.returns)
        if deferred and isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        skip.update(id(n) for x in notes if x is not None for n in ast.walk(x))
    # isinstance(x, A | B): any union there is one of types
    second = {id(n) for c in ast.walk(tree) if isinstance(c, ast.Call)
              and isinstance(c.func, ast.Name) and c.func.id in ("isinstance", "issubclass")
              and len(c.args) == 2 for n in ast.walk(c.args[1])}
    return sorted({n.lineno for n in ast.walk(tree)
                   if id(n) not in skip and isinstance(n, ast.BinOp)
                   and isinstance(n.op, ast.BitOr)
                   and (id(n) in second or _is_type(n.left) or _is_type(n.right))})


def test_no_union_type_is_evaluated_at_run_time() -> None:
    found = {str(f.relative_to(REPO)): lines for f in CLOSURE
             if (lines := _runtime_unions(ast.parse(f.read_text())))}
    assert not found, f"X | Y evaluated at run time needs 3.10 (use Optional/Union): {found}"


def test_the_union_check_sees_what_it_must() -> None:
    bad = ast.parse("from __future__ import annotations\nAlias = int | None\n"
                    "def f(x: int | None) -> str | None:\n    return isinstance(x, int | str)\n")
    assert _runtime_unions(bad) == [2, 4]
    assert _runtime_unions(ast.parse("def f(x: int | None): pass\n")) == [1]
    assert _runtime_unions(ast.parse("import re\nF = re.M | re.S\nG = a[1] << 3 | b[2]\n")) == []
    assert _runtime_unions(ast.parse("T = Mapping[str, int] | None\nisinstance(x, A | B)\n")
                           ) == [1, 2]


# ---- the 3.9 stand-ins, run here ---------------------------------------------------------------

# AGENT_ONLY on a Python that says it is VERSION: numpy and httpx are imported first (as
# installed for this interpreter), then sys.version_info is set, so that our modules, which
# read it when imported, take the branches they take on that Python.
def _as_python(version: tuple[int, int, int]) -> str:
    return ("import sys, numpy, httpx, httpcore\n"
            f"sys.version_info = {(*version, 'final', 0)!r}\n" + AGENT_ONLY)


def _run_as(version: tuple[int, int, int], argv: list[str],
            tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = fake_nvidia_smi(tmp_path / "node", gpus=2)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-c", _as_python(version), *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_one_round_on_the_python_3_9_stand_ins(tmp_path: Path) -> None:
    res = _run_as((3, 9, 18), ["agent", "--once", "--stdout", "--source", "nvidia-smi",
                               "--host", "n9", "--spool", str(tmp_path / "spool")], tmp_path)
    assert res.returncode == 0, res.stderr
    gpus = [x for x in res.stdout.splitlines() if x.startswith("gpu,")]
    assert {x.split(",")[1] for x in gpus} == {"gpu=0", "gpu=1"}
    assert "collector=nvidia_smi" in res.stdout


@pytest.mark.parametrize("argv", [["serve"], ["demo", "--speed", "0"], ["replay", "x"],
                                  ["token", "list"]])
def test_server_commands_refuse_below_python_3_11(argv: list[str], tmp_path: Path) -> None:
    res = _run_as((3, 10, 12), argv, tmp_path)
    assert res.returncode == 2, res.stderr
    assert (f"gpuhealth {argv[0]}: needs Python 3.11 or newer (this is Python 3.10.12)"
            in res.stderr), res.stderr
    assert "Traceback" not in res.stderr


def test_help_below_python_3_11_lists_what_runs(tmp_path: Path) -> None:
    res = _run_as((3, 10, 12), ["--help"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "demo" in res.stdout and "(not available: needs Python 3.11 or newer)" in res.stdout
    assert "run collectors on a GPU node" in res.stdout


def test_zip_strict_raises_on_a_length_mismatch_both_ways() -> None:
    from collectors.compat import _zip_checked

    for z in (zip_strict, _zip_checked):
        assert list(z([1, 2], "ab")) == [(1, "a"), (2, "b")]
        with pytest.raises(ValueError, match=r"length|shorter|longer"):
            list(z([1, 2], "a"))
        with pytest.raises(ValueError, match=r"length|shorter|longer"):
            list(z([1], "ab"))


def test_str_enum_stand_in_behaves_as_the_standard_one() -> None:
    import enum

    from collectors.compat import _StrEnum39

    class Fallback(_StrEnum39):
        A = "a-value"
        B = enum.auto()

    class Standard(StrEnum):
        A = "a-value"
        B = enum.auto()

    for cls in (Fallback, Standard):
        assert str(cls.A) == f"{cls.A}" == cls.A == "a-value" and f"{cls.A:>8}" == " a-value"
        assert cls("a-value") is cls.A and isinstance(cls.A, str) and cls.B == "b"


def test_dataclass_stand_in_takes_slots_and_leaves_it_out() -> None:
    from collectors.compat import _dataclass39

    @_dataclass39(frozen=True, slots=True)
    class P:
        x: int

    assert P(1) == P(1) and not hasattr(P, "__slots__") and hasattr(P(1), "__dict__")
