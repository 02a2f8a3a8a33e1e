"""parse_exposition against the parse it replaced: prometheus_client's text parser over the whole
page, then the same mapping. On every real dcgm-exporter page, our own capture and pages that use
the rarer parts of the format (comments, timestamps, escapes, CRLF, histograms), both must give
the same points and the same stats: reading the page line by line changed nothing a whole page
says. Only a broken page differs, and test_own_capture covers that."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.dcgm import ParseStats, parse_exposition
from collectors.dcgm.exposition import _one
from collectors.dcgm.fields import FIELDS
from collectors.lineprotocol import Point
from tests.collectors.dcgm.pages import L4, T4, exposition, needs_pages
from tests.collectors.own_captures import DCGM_PAGE, read

TS = 1_700_000_000_000_000_000


def _reference(text: str, host: str | None) -> tuple[list[Point], ParseStats]:
    """The parse before the line-by-line reader, kept verbatim as the oracle."""
    st = ParseStats()
    points: dict[tuple[str, str, str, str | None, str | None], Point] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == fam.name:
                name: str | None = fam.name
            elif fam.type == "counter" and sample.name == fam.name + "_total":
                name = fam.name
            else:
                name = None
            if name is None or not name.startswith("DCGM_FI_"):
                continue
            st.samples += 1
            try:
                value = float(sample.value)
            except OverflowError:
                value = math.inf
            _one(points, st, FIELDS, name, sample.labels, value, host, TS)
    return list(points.values()), st


def _same(text: str, host: str | None = None) -> None:
    want, want_st = _reference(text, host)
    st = ParseStats()
    got = parse_exposition(text, host, TS, stats=st)
    assert [(p.measurement, p.tags, p.fields, p.ts_ns) for p in got] == [
        (p.measurement, p.tags, p.fields, p.ts_ns) for p in want]
    assert st == want_st


def _fenced_blocks(path: Path) -> Iterator[str]:
    block: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if block is not None:
                yield "\n".join(block) + "\n"
            block = None if block is not None else []
        elif block is not None:
            block.append(line)


@needs_pages
@pytest.mark.parametrize("path", [L4, T4], ids=lambda p: p.name)
@pytest.mark.parametrize("host", [None, "node-7"])
def test_real_pages_parse_as_before(path: Path, host: str | None) -> None:
    text = exposition(path)
    assert parse_exposition(text, host, TS)  # the page gives points, so the match means something
    _same(text, host)


@needs_pages
@pytest.mark.parametrize("path", [L4, T4], ids=lambda p: p.name)
def test_every_fenced_block_and_the_filtered_lines_parse_as_before(path: Path) -> None:
    md = path.read_text(encoding="utf-8")
    for block in _fenced_blocks(path):
        try:
            _reference(block, None)
        except ValueError:
            continue  # a shell command or prose: not a page, nothing to compare
        _same(block, None)
    _same("\n".join(x for x in md.splitlines()
                    if x.startswith(("# HELP DCGM", "# TYPE DCGM", "DCGM_"))) + "\n", None)


def test_own_capture_parses_as_before() -> None:
    _same(read(DCGM_PAGE))
    _same(read(DCGM_PAGE), "n1")


_L = 'gpu="{g}",UUID="GPU-{g}",Hostname="h1"'


def _s(name: str, value: str, g: int = 0, extra: str = "") -> str:
    return f"{name}{{{_L.format(g=g)}{extra}}} {value}"


_FORMAT_CASES = {
    "crlf and blank lines": "\r\n".join([
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "", _s("DCGM_FI_DEV_GPU_TEMP", "40"),
        "   " + _s("DCGM_FI_DEV_GPU_TEMP", "41", g=1) + "  ", ""]),
    "comments and timestamps": "\n".join([
        "# a free comment", "#", "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter",
        _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "5 1700000000000"),
        _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "6\t-12", g=1), ""]),
    "escapes and odd label spacing": "\n".join([
        'DCGM_FI_DEV_GPU_TEMP{ gpu = "0" , UUID="GPU-a\\"b\\\\c\\nd\\te", Hostname="h1", } 50',
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="",Hostname="h1"} 51', ""]),
    "special values": "\n".join([
        _s("DCGM_FI_DEV_GPU_TEMP", "NaN"), _s("DCGM_FI_DEV_POWER_USAGE", "+Inf"),
        _s("DCGM_FI_DEV_MEMORY_TEMP", "-inf"), _s("DCGM_FI_DEV_SM_CLOCK", "1.5e3"),
        _s("DCGM_FI_DEV_MEM_CLOCK", "9" * 400), _s("DCGM_FI_DEV_GPU_UTIL", "-0.0", g=1),
        _s("DCGM_FI_DEV_XID_ERRORS", "79.0", g=1), _s("DCGM_FI_DEV_GPU_TEMP", ".5", g=1), ""]),
    "families of every type, interleaved": "\n".join([
        "# TYPE DCGM_FI_DEV_GPU_TEMP histogram", _s("DCGM_FI_DEV_GPU_TEMP_bucket", "1"),
        _s("DCGM_FI_DEV_GPU_TEMP_count", "1"), _s("DCGM_FI_DEV_GPU_TEMP", "3"),
        "# TYPE DCGM_FI_DEV_MEMORY_TEMP summary", _s("DCGM_FI_DEV_MEMORY_TEMP", "60"),
        _s("DCGM_FI_DEV_MEMORY_TEMP_sum", "1"), _s("DCGM_FI_DEV_SM_CLOCK", "1400"),
        _s("DCGM_FI_DEV_MEMORY_TEMP_sum", "1"), "# TYPE DCGM_FI_X_total counter",
        _s("DCGM_FI_X_total", "4"), "# HELP DCGM_FI_DEV_POWER_USAGE power",
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge", "# HELP DCGM_FI_DEV_POWER_USAGE again",
        _s("DCGM_FI_DEV_POWER_USAGE", "300", g=1), "# TYPE DCGM_FI_DEV_SM_CLOCK info",
        _s("DCGM_FI_DEV_SM_CLOCK", "1500", g=1), "go_goroutines 12", "up{job=\"x\"} 1",
        "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter",
        _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "2"), _s("DCGM_FI_DEV_GPU_UTIL", "7"),
        _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "3", g=1), ""]),
    "no labels": "DCGM_FI_DEV_GPU_TEMP 40\n",
    "empty": "",
}


@pytest.mark.parametrize("text", list(_FORMAT_CASES.values()), ids=list(_FORMAT_CASES))
@pytest.mark.parametrize("host", [None, "n1"])
def test_the_rarer_parts_of_the_format_parse_as_before(text: str, host: str | None) -> None:
    _same(text, host)
