"""bench.state_db at a tiny size against a real PostgreSQL: it runs and prints its figures."""

from __future__ import annotations

import re

import pytest

from tests.postgres import INITDB, MISSING, POSTGRES


@pytest.mark.skipif(POSTGRES is None or INITDB is None, reason=MISSING)
def test_the_state_db_bench_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.state_db import main

    assert main(["--writers", "2", "--each", "20", "--solo", "20", "--ticks", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"one writer: \d+\.\d\d ms per write transaction", out)
    assert re.search(r"2 writers: [\d,]+ write transactions/s", out)
    assert re.search(r"an alert tick of 50 level changes: \d+\.\d ms", out)
