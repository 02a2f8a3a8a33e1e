"""The query checker: clean on the dashboards' queries (test_dashboards), and it fails on
what does not exist. A checker that passed everything would make that test worthless."""

from __future__ import annotations

import pytest

from service.grafana.check import check_query, tokenize
from service.grafana.inventory import all_queries, expand

GOOD = ('SELECT mean("gpu_temp") AS "t" FROM "gpu" WHERE $timeFilter AND '
        '"host" =~ /^$node$/ GROUP BY time($__interval), "gpu" fill(null)')


def test_a_good_query_passes() -> None:
    assert check_query(GOOD) == []


@pytest.mark.parametrize("query,expect", [
    # A made-up metric, as a typo in a panel would be.
    (GOOD.replace("gpu_temp", "gpu_tmp"), "'gpu_tmp' is neither a field nor a tag of 'gpu'"),
    ('SELECT max("hbm_melting") FROM "gpu" WHERE $timeFilter', "'hbm_melting'"),
    # A real metric in the wrong measurement (an NVLink counter is not a GPU field).
    (GOOD.replace("gpu_temp", "nvlink_crc_flit"), "'nvlink_crc_flit'"),
    # A gauge has no rate measurement.
    ('SELECT max("gpu_temp") FROM "gpu_rate" WHERE $timeFilter', "'gpu_temp'"),
    (GOOD.replace('FROM "gpu"', 'FROM "gpus"'), "unknown measurement 'gpus'"),
    (GOOD.replace('"host" =~', '"hostname" =~'), "WHERE: 'hostname'"),
    (GOOD.replace(', "gpu" fill', ', "link" fill'), "GROUP BY: 'link' is not a tag"),
    (GOOD.replace(', "gpu" fill', ', "gpu_temp" fill'), "GROUP BY: 'gpu_temp' is not a tag"),
    ('SELECT "summary", "level" FROM "alert" WHERE $timeFilter', "both a tag and a field"),
    ('SELECT "level"::tag FROM "risk" WHERE $timeFilter', "'level' is not a tag of 'risk'"),
    ('SELECT count("lvl") FROM (SELECT last("level") AS "level" FROM "risk" WHERE $timeFilter '
     'GROUP BY "entity") WHERE "level" = 3', "'lvl'"),
    ('SELECT count("level") FROM (SELECT last("levels") AS "level" FROM "risk" WHERE '
     '$timeFilter GROUP BY "entity")', "'levels'"),
    ('SHOW TAG VALUES FROM "gpu" WITH KEY = "node"', "WITH KEY: 'node' is not a tag"),
    ('SHOW TAG VALUES FROM "gpu" WITH KEY = "host" WHERE "cluser" =~ /^$cluster$/',
     "WHERE: 'cluser'"),
    ('SHOW TAG VALUES WITH KEY = "host"', "without FROM"),
    ('SHOW MEASUREMENTS', "only SHOW TAG VALUES"),
    ('SELECT mean("gpu_temp") INTO "x" FROM "gpu" WHERE $timeFilter', "SELECT INTO"),
    (GOOD + '; DROP DATABASE "gpuhealth"', "one statement"),
    ('SELECT "code" FROM "xid" WHERE $timeFilter ORDER BY "code"', "orders by time only"),
    ('SELECT mean("gpu_temp") FROM "gpu" WHERE "gpu" =~ /unterminated', "regex"),
])
def test_what_does_not_exist_is_reported(query: str, expect: str) -> None:
    problems = check_query(query)
    assert problems, query
    assert any(expect in p for p in problems), problems


def test_a_made_up_metric_in_a_real_dashboard_query_is_caught() -> None:
    q = next(q for q in all_queries() if '"gpu_temp"' in q.query)
    assert check_query(q.query) == []
    assert check_query(q.query.replace('"gpu_temp"', '"gpu_temperature"'))


def test_expanded_queries_check_as_well() -> None:
    values = {"cluster": "c1", "node": ["n1", "n2"], "gpu": "0", "device": "mlx5_0"}
    for q in all_queries():
        assert check_query(expand(q.query, values)) == [], q.title


def test_tokens() -> None:
    toks = tokenize('SELECT "a\\"b"::field FROM x WHERE y =~ /^a\\/b$/ AND time > now() - 6h')
    kinds = [(t.kind, t.text) for t in toks]
    assert ("ident", 'a"b') in kinds and ("regex", "/^a\\/b$/") in kinds
    assert ("num", "6h") in kinds and ("op", "::") in kinds and ("word", "select") in kinds
