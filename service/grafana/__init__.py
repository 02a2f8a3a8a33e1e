"""Grafana dashboards for gpuhealth's InfluxDB storage, generated from the metric catalog and
the storage contract (docs/influxdb.md); `python -m service.grafana` writes dashboards/*.json.

For tests that run the dashboards' queries: `all_queries()` lists them, `expand()` fills in
Grafana's macros and variables, `check_query()` says what a query names outside the contract.
"""

from service.grafana.check import check_query
from service.grafana.inventory import ALL, DashboardQuery, all_queries, dashboard_queries, expand
from service.grafana.panels import DATASOURCE_UID

__all__ = ["ALL", "DATASOURCE_UID", "DashboardQuery", "all_queries", "check_query",
           "dashboard_queries", "expand"]
