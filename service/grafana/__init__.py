"""Grafana dashboards for gpuhealth's InfluxDB storage, generated from the metric catalog and
the storage contract (docs/influxdb.md); `python -m service.grafana` writes dashboards/*.json.

For tests that run the dashboards' queries: `inventory.all_queries()` lists them, `expand()` fills
in Grafana's macros and variables, `check.check_query()` says what a query names outside the
contract.
"""
