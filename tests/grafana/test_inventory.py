"""Listing a dashboard's queries and expanding Grafana's macros and variables the way its
InfluxDB data source does."""

from __future__ import annotations

import re

import pytest

from service.grafana.inventory import ALL, all_queries, dashboard_queries, expand
from service.grafana.panels import annotation, dashboard, row, target, timeseries, variable

Q = 'SELECT "x" FROM "gpu" WHERE $timeFilter AND "host" =~ /^$node$/ GROUP BY time($__interval)'


def test_relative_range_and_interval() -> None:
    assert expand(Q, {"node": "n1"}, time_range="6h", interval="1m") == (
        'SELECT "x" FROM "gpu" WHERE time > now() - 6h AND "host" =~ /^n1$/ '
        'GROUP BY time(1m)')


def test_absolute_range_in_milliseconds() -> None:
    out = expand(Q, {"node": "n1"}, time_range=(1_700_000_000.0, 1_700_003_600.5))
    assert "time >= 1700000000000ms AND time <= 1700003600500ms" in out


@pytest.mark.parametrize("value,expect", [
    ("n1.example", r"/^n1\.example$/"),
    ("a/b", r"/^a\/b$/"),
    (["n1", "n2.x"], r"/^(n1|n2\.x)$/"),
    (["solo"], "/^solo$/"),
    (ALL, "/^.*$/"),
    ([ALL, "n1"], "/^.*$/"),
])
def test_variables_in_a_regex_are_escaped(value: str | list[str], expect: str) -> None:
    assert expect in expand(Q, {"node": value})


def test_braced_variables_and_plain_context() -> None:
    q = "SELECT \"x\" FROM \"gpu\" WHERE $timeFilter AND \"host\" = '${node}'"
    assert expand(q, {"node": "n1"}).endswith("\"host\" = 'n1'")
    with pytest.raises(ValueError, match="one value"):
        expand(q, {"node": ["a", "b"]})


def test_a_missing_variable_fails() -> None:
    with pytest.raises(KeyError, match=r"\$node"):
        expand(Q)
    with pytest.raises(ValueError, match="no value"):
        expand(Q, {"node": []})


def test_lists_targets_of_rows_variables_and_annotations() -> None:
    inner = timeseries("Inner", [target("SELECT 1 FROM a WHERE $timeFilter", "B")])
    collapsed = {**row("Folded"), "collapsed": True, "panels": [inner]}
    d = dashboard("u", "t", "", [timeseries("P", [target("q1"), target("q2", "B")]), collapsed],
                  variables=[variable("node", "Node", "SHOW TAG VALUES ...")],
                  annotations=[annotation("Ann", "SELECT a FROM b", color="red", text="a",
                                          tags=[])])
    got = [(q.kind, q.title, q.query) for q in dashboard_queries(d)]
    assert got == [("panel", "P [A]", "q1"), ("panel", "P [B]", "q2"),
                   ("panel", "Inner [B]", "SELECT 1 FROM a WHERE $timeFilter"),
                   ("variable", "variable node", "SHOW TAG VALUES ..."),
                   ("annotation", "annotation Ann", "SELECT a FROM b")]


def test_every_shipped_query_expands_with_the_dashboards_variables() -> None:
    values = {"cluster": ALL, "node": ALL, "gpu": ALL, "device": ALL}
    for q in all_queries():
        out = expand(q.query, values)
        assert not re.search(r"\$\w", out), (q.title, out)
