"""`python -m bench.model --from-influx GPUS DAYS --tier` at a smoke size: the hour tier written
through the pipeline into a real influxd, then `train --from-influx` in a child process reads
it (not the raw replay) and reports its wall time and peak memory."""

from __future__ import annotations

import shutil

import pytest

from bench.model_tier import run


@pytest.mark.slow
def test_the_tier_bench_trains_from_the_hour_tier() -> None:
    if shutil.which("influxd") is None:
        pytest.skip("influxd is not installed (apt-get install influxdb; .ci/run does)")
    r = run(128, 7, epochs=1)
    assert r["rounds"] == 7 * 24 and r["lines"] > 128 * 7 * 24  # GPUs and IB ports per hour
    assert r["train_wall_s"] > 0 and r["peak_rss_mb"] > 0
    assert any("hour tier:" in line for line in r["output"]), r["output"]
