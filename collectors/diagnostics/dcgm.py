"""`dcgmi diag -r 1|2|3 [-j]`: DCGM's diagnostics, JSON or the text table, DCGM 3.x and 4.x.

Formats, from NVIDIA/DCGM dcgmi/Diag.cpp and nvvs/include/NvvsJsonStrings.h:
- JSON, 4.x (HelperJsonBuildOutput): {"DCGM Diagnostic": {"test_categories": [{"category":
  "Hardware", "tests": [{"name": "memory", "results": [{"entity_group": "GPU",
  "entity_group_id": 1, "entity_id": 0, "status": "Pass"|"Fail"|"Skip", "warnings":
  [{"warning", "error_id", "error_category", "error_severity"}], "info": [...]}],
  "test_summary": {"status", ...}}]}]}, "entity_groups": [...], "metadata": {"version",
  "Driver Version Detected"}}. A warned result is written "Fail" (HelperDisplayDiagResult
  without DDR_DISPLAY_WARN); a test not run has no result.
- JSON, 3.x (the dcgmDiagResponse_v10 era): the same categories under "DCGM GPU Diagnostic"
  (later "DCGM Diagnostic"), display names ("GPU Memory", "Targeted Stress"), results with
  "gpu_id" as a string, "info" a string, "version" and "Driver Version Detected" at the top;
  a test list may hold null entries; the Deployment tests' warning text sits under "warnings".
- An error instead of a result (HelperDisplayFailureMessage): {"DCGM Diagnostic":
  {"version", "runtime_error": "..."}} with -j, the bare message without; a host engine that
  cannot be reached: "Error: Unable to connect to host engine. ..." (Command.cpp), in text
  even with -j. With -i N the documents sit in {"iterations": [...], "Overall Result"}.
- Text (HelperDisplayAsCli): the "| name | result |" table (names 25 wide, results 46, longer
  messages cut at 45 characters onto the next rows), sections Metadata, Deployment, Hardware,
  Integration, Stress; 4.x: a test's row ("memory | Fail") then one row per entity
  ("GPU1: Fail") and "Warning: GPU1" rows; 3.x: "Pass - All", "Fail - GPU: 1",
  "Pass - GPUs: 0, 2" and "Warning" rows.

Each (test, GPU) becomes a check named as DCGM 4.x names its plugins ("memory", "pcie",
"targeted_stress"; the 3.x deployment checks are all "software"). Pass passes; Fail fails with
DCGM's warnings as the detail; Skip and Warn pass and say so, but a run where DCGM skipped
everything is an error (nothing was verified). dcgmi exits non-zero (226 for a failure) when
a test fails; DCGM makes no figures of its own to hold to an expected minimum.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from collectors.compat import dataclass
from collectors.diagnostics.output import bounded, exit_note, killed, unreadable
from collectors.diagnostics.result import Check, Status, SuiteResult, build

if TYPE_CHECKING:
    from collectors.diagnostics.settings import SuiteSpec

TOOL = "dcgmi diag"
FIGURES: frozenset[str] = frozenset()  # DCGM judges its own tests

_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
_DEPLOYMENT = {"denylist", "blacklist", "nvml library", "cuda main library",
               "cuda toolkit library", "permissions and os blocks",
               "permissions and os-related blocks", "persistence mode", "environment variables",
               "environmental variables", "page retirement/row remap", "graphics processes",
               "inforom", "software"}
_NAMES = {"gpu memory": "memory", "sm stress": "sm_stress", "targeted stress": "targeted_stress",
          "targeted power": "targeted_power", "memory bandwidth": "memory_bandwidth",
          "pulse test": "pulse_test", "eud test": "eud", "cpu eud test": "cpu_eud",
          "context create": "context_create"}
_INFO_WIDTH = 45  # DATA_INFO_TAG_LEN: a long message continues on the next row
_SECTION = re.compile(r"^[|+]-----\s+(\w+)\s+-+[+|]")
_ENTITY = re.compile(r"^(GPU|CPU|NvSwitch|Switch)\s?(\d+):\s*(\w+)", re.I)
_SUMMARY_3X = re.compile(r"^(Pass|Fail|Skip|Warn)\s+-\s+(All|GPUs?:\s*([\d,\s]+))", re.I)
_RULE = re.compile(r"^\+-+\+-+\+$")
_INFO = re.compile(r"^Info(?::|$)")
_WARNING = re.compile(r"^Warning(?::\s*(GPU|CPU)\s?(\d+))?$", re.I)


def check_name(raw: str) -> str:
    """DCGM 4.x's plugin name for a test ('GPU Memory' -> 'memory')."""
    low = " ".join(raw.strip().lower().split())
    if low in _DEPLOYMENT:
        return "software"
    return _NAMES.get(low, re.sub(r"[^a-z0-9]+", "_", low).strip("_") or "unnamed")


def parse(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str) -> SuiteResult:
    text, cut = bounded(text)
    start = text.find("{")
    if start >= 0 and _looks_like_json(text, start):
        try:
            doc, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            return _cut_json(text[start:], exit_code, spec, gpu_model, cut)
        if isinstance(doc, dict):
            return _from_json(doc, text[:start], exit_code, spec, gpu_model)
    return _from_text(text, exit_code, spec, gpu_model, cut)


# ---- JSON ----------------------------------------------------------------------------------

def _looks_like_json(text: str, start: int) -> bool:
    return '"' in text[start:start + 200] or text[start:].strip() == "{"


def _from_json(doc: dict[str, Any], before: str, exit_code: int | None, spec: SuiteSpec,
               gpu_model: str) -> SuiteResult:
    docs = [d for d in doc.get("iterations", []) if isinstance(d, dict)] or [doc]
    checks: list[Check] = []
    versions: dict[str, str] = {}
    errors = _error_lines(before)
    for one in docs:
        root = next((one[k] for k in _ROOTS if isinstance(one.get(k), dict)), None)
        versions.update(_json_versions(one, root or {}))
        if root is None:
            if isinstance(one.get("error"), str) or "runtime_error" in one:
                errors.append(str(one.get("error") or one.get("runtime_error")))
                continue
            return build(spec.name, (), versions, unreadable(
                "a DCGM diagnostic document (no 'DCGM Diagnostic' key)", json.dumps(one)[:200],
                exit_code), gpu_model)
        if root.get("runtime_error"):
            errors.append(str(root["runtime_error"]))
        for category in _list(root.get("test_categories")):
            for test in _list(category.get("tests") if isinstance(category, dict) else None):
                if isinstance(test, dict):
                    checks.extend(_json_test(test))
    error = ""
    if errors:
        error = f"DCGM could not run the diagnostic: {' '.join(errors)}{exit_note(exit_code)}"
    return _finish(spec, checks, versions, error, exit_code, gpu_model)


def _json_versions(doc: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    meta = doc.get("metadata")
    for where in (root, doc, meta if isinstance(meta, dict) else {}):
        if isinstance(where.get("version"), str):
            out["dcgm"] = where["version"]
        if isinstance(where.get("Driver Version Detected"), str):
            out["driver"] = where["Driver Version Detected"]
    return out


def _json_test(test: Mapping[str, Any]) -> Iterator[Check]:
    raw = str(test.get("name", ""))
    name = check_name(raw)
    sub = f"{raw}: " if name == "software" and raw.lower() != "software" else ""
    got = False
    for r in _list(test.get("results")):
        if not isinstance(r, dict):
            continue
        word = str(r.get("status", ""))
        if not word or word.lower() == "not run":
            continue
        detail = sub + _messages(r)
        for gpu, where in _entities(r):
            got = True
            yield _check(name, word, gpu, where + detail)
    summary = test.get("test_summary")
    if not got and isinstance(summary, dict) and summary.get("status"):
        yield _check(name, str(summary["status"]), None, sub + _messages(summary))


def _entities(r: Mapping[str, Any]) -> list[tuple[int | None, str]]:
    """The GPUs a result is about, with a prefix naming a non-GPU entity."""
    group = str(r.get("entity_group", "GPU"))
    if "entity_id" in r:
        eid = _int(r["entity_id"])
        if group.upper() == "GPU" or r.get("entity_group_id") == 1:
            return [(eid, "")]
        return [(None, f"{group} {r['entity_id']}: ")]
    ids = r.get("gpu_id", r.get("gpu_ids"))
    if isinstance(ids, int) and not isinstance(ids, bool):
        return [(ids, "")]
    if isinstance(ids, str) and ids.strip():
        return [(_int(p), "") for p in ids.split(",") if p.strip()]
    return [(None, "")]


def _messages(r: Mapping[str, Any]) -> str:
    out: list[str] = []
    for w in _list(r.get("warnings")):
        if isinstance(w, dict):
            msg = w.get("warning", w.get("warnings"))
            if isinstance(msg, str) and msg:
                out.append(msg.strip())
        elif isinstance(w, str):
            out.append(w.strip())
    return "; ".join(out)


def _cut_json(doc: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str,
              cut: bool) -> SuiteResult:
    """A document that stops early (killed at its time limit): the results already written
    still count when they show a failure."""
    checks: list[Check] = []
    name, gpu, summary = "", None, False
    for m in re.finditer(r'"(name|entity_id|gpu_id|gpu_ids|status|test_summary)"\s*:\s*"?'
                         r'([^",\n]*)"?', doc):
        key, value = m.group(1), m.group(2).strip()
        if key == "name":
            name, gpu, summary = check_name(value), None, False
        elif key == "test_summary":
            gpu, summary = None, True
        elif key in ("entity_id", "gpu_id", "gpu_ids"):
            gpu = _int(value)
        elif name and value.lower() == "fail":
            if summary and any(c.name == name for c in checks):
                continue  # the summary of a test whose failing GPU is already known
            checks.append(Check(name, Status.FAIL, gpu,
                                detail="from an output cut short; its warnings were lost"))
    how = killed(exit_code) or "stopped early"
    why = (f"the JSON output ends before the document closes ({how}"
           f"{'; the output was over the size cap' if cut else ''})")
    return build(spec.name, checks, {}, why, gpu_model)


# ---- text ----------------------------------------------------------------------------------

@dataclass(slots=True)
class _Test:
    name: str
    raw: str
    word: str = ""  # the test's own row: "Fail", or 3.x "Fail - All"
    gpus: dict[int, str] = field(default_factory=dict)
    warnings: dict[int | None, list[str]] = field(default_factory=dict)


def _from_text(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str,
               cut: bool) -> SuiteResult:
    versions: dict[str, str] = {}
    tests: list[_Test] = []
    section = ""
    chunks: list[str] | None = None  # the message being continued
    warn_gpu: int | None = None  # whose message it is
    for line in text.splitlines():
        s = line.strip()
        m = _SECTION.match(s)
        if m:
            section, chunks = m.group(1).lower(), None
            continue
        if not (s.startswith("|") and s.endswith("|")) or s.count("|") < 3:
            continue
        parts = s[1:-1].split("|", 1)
        name, info_raw = parts[0].strip(), parts[1][1:] if parts[1][:1] == " " else parts[1]
        info = info_raw.strip()
        if name == "Diagnostic" and info == "Result":
            continue
        if section == "metadata":
            key = {"DCGM Version": "dcgm", "Driver Version Detected": "driver"}.get(name)
            if key:
                versions[key] = info
            continue
        w = _WARNING.match(name)
        if w and tests:
            gpu = _int(w.group(2)) if w.group(1) and w.group(1).upper() == "GPU" else None
            chunks, warn_gpu = [info_raw], gpu
            tests[-1].warnings.setdefault(gpu, []).append("")
            _set_last(tests[-1], gpu, chunks)
            continue
        if _INFO.match(name) or name == "Error":  # not "Inforom", a deployment test
            chunks = None
            continue
        if name:
            tests.append(_Test(check_name(name), name, word=info))
            _entity_row(tests[-1], info)  # 3.x starts a GPU list on the test's own row
            chunks = None
            continue
        # A row without a name: an entity's result, a 3.x GPU list, or a message going on.
        if tests and _entity_row(tests[-1], info):
            chunks = None
        elif tests and chunks is not None:
            chunks.append(info_raw)
            _set_last(tests[-1], warn_gpu, chunks)
    errors = _error_lines(text)
    if not tests and not versions:
        if errors:
            return build(spec.name, (), {}, f"DCGM could not run the diagnostic: "
                         f"{' '.join(errors)}{exit_note(exit_code)}", gpu_model)
        return build(spec.name, (), {}, unreadable(TOOL, text, exit_code), gpu_model)
    checks = [c for t in tests for c in _text_checks(t)]
    error = ""
    if errors:
        error = f"DCGM reported: {' '.join(errors)}"
    elif not _closed(text):
        error = f"the table ends before its last row ({killed(exit_code) or 'stopped early'})"
    if cut:
        error = "; ".join(p for p in (error, "the output was over the size cap") if p)
    return _finish(spec, checks, versions, error, exit_code, gpu_model)


def _closed(text: str) -> bool:
    """Whether the table's footer (a +---+---+ rule after the +===+ header) was printed."""
    lines = [ln.strip() for ln in text.splitlines()]
    header = max((i for i, ln in enumerate(lines) if ln.startswith("+====")), default=-1)
    return any(_RULE.match(ln) for ln in lines[header + 1:]) if header >= 0 else False


def _set_last(test: _Test, gpu: int | None, chunks: list[str]) -> None:
    head = [c[:_INFO_WIDTH] for c in chunks[:-1]]
    test.warnings[gpu][-1] = ("".join(head) + chunks[-1]).strip()


def _entity_row(test: _Test, info: str) -> bool:
    m = _ENTITY.match(info)
    if m:
        if m.group(1).upper() == "GPU":
            test.gpus[int(m.group(2))] = m.group(3)
        return True
    m = _SUMMARY_3X.match(info)
    if m:
        for p in (m.group(3) or "").split(","):
            if p.strip().isdigit():
                test.gpus[int(p)] = m.group(1)
        return True
    return False


def _text_checks(t: _Test) -> Iterator[Check]:
    common = "; ".join(w for w in t.warnings.get(None, []) if w)
    if t.gpus:
        for gpu, word in sorted(t.gpus.items()):
            own = "; ".join(w for w in t.warnings.get(gpu, []) if w)
            if not own and word.lower() not in ("pass", "skip"):
                own = common
            yield _check(t.name, word, gpu, own)
        return
    m = _SUMMARY_3X.match(t.word)
    word = m.group(1) if m else t.word.split()[0] if t.word else ""
    own = "; ".join(w for ws in t.warnings.values() for w in ws if w)
    if own and t.name == "software" and t.raw.lower() != "software":
        own = f"{t.raw}: {own}"  # which deployment check it was
    yield _check(t.name, word, None, own)


# ---- both ----------------------------------------------------------------------------------

def _check(name: str, word: str, gpu: int | None, detail: str) -> Check:
    low = word.strip().lower()
    if low == "pass":
        return Check(name, Status.PASS, gpu, detail=detail)
    if low == "fail":
        return Check(name, Status.FAIL, gpu, detail=detail or "failed (DCGM gave no reason)")
    if low in ("skip", "skipped"):
        return Check(name, Status.PASS, gpu, detail=_lead("skipped by DCGM", detail))
    if low in ("warn", "warning"):
        return Check(name, Status.PASS, gpu, detail=_lead("DCGM warning", detail))
    # An unknown word is no evidence of health.
    return Check(name, Status.ERROR, gpu, detail=f"unknown DCGM status {word!r}")


def _finish(spec: SuiteSpec, checks: list[Check], versions: dict[str, str], error: str,
            exit_code: int | None, gpu_model: str) -> SuiteResult:
    if checks and not error and all(c.detail.startswith("skipped") for c in checks):
        error = "DCGM skipped every test: nothing was verified"
    failed = any(c.status is Status.FAIL for c in checks)
    if exit_code and not failed and not error:
        error = f"dcgmi{exit_note(exit_code)} though its output shows no failure"
    return build(spec.name, checks, versions, error, gpu_model)


def _error_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Error")][:5]


def _lead(head: str, detail: str) -> str:
    return f"{head}: {detail}" if detail else head


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _int(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except ValueError:
        return None
