"""Generate docs/metrics.md from the metric catalog (and the per-entity gauges /metrics exports).

`python -m service.commands.docs` rewrites the page; `--check` only compares and exits 1 when the
page is stale, so CI catches a catalog edit that was not followed by a regeneration. The page is
a pure function of the catalog (no dates, no host names) so that the check is exact.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from collectors.catalog import CATALOG, Catalog, Kind, Metric, Scope
from service.runtime.entity_metrics import GAUGES, series_count

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

# Scope -> (section title, what one entity is, an example entity key as collectors/frames.py
# spells it).
_SCOPES: dict[Scope, tuple[str, str, str]] = {
    Scope.GPU: ("GPUs", "a GPU of a node", "node:gpu3"),
    Scope.NVLINK: ("NVLink links", "one NVLink link of a GPU", "node:gpu3:nvlink7"),
    Scope.IB_PORT: ("InfiniBand ports", "one port of an InfiniBand HCA", "node:mlx5_0:1"),
    Scope.NODE: ("Nodes", "a whole host: its chassis sensors, host errors and BMC events",
                 "node"),
    Scope.PSU: ("Power supplies", "one power supply of a node's chassis, by its BMC id",
                "node:psu0"),
    Scope.FAN: ("Fans", "one chassis fan of a node, by its BMC id", "node:fan3"),
}

# Kind -> (what it is, how it is stored and used).
_KINDS: dict[Kind, tuple[str, str]] = {
    Kind.GAUGE: ("A level sampled now (temperature, power, clock).",
                 "Stored as read; rollups keep min, mean, max and last."),
    Kind.COUNTER: ("A cumulative count (ECC errors, link errors, data words).",
                   "Stored raw and cumulative; rates and deltas are derived with reset detection."),
    Kind.STATE: ("An enumerated or boolean condition (throttle active, remap pending, port state).",
                 "Stored as its number: 0/1, or the enum value the description gives."),
    Kind.EVENT: ("A discrete occurrence carrying a code (Xid).",
                 "Not a frame column: kept in the event stream with its time and code."),
}

_HEADER = ("Metric", "Unit", "Kind", "Resets", "Valid range", "Description")
# Source columns (Metric attribute, heading): a scope's table shows those some metric of the
# scope has, so a supply's table is not eight columns of dashes for GPU tools.
_SOURCE_COLUMNS = (
    ("dcgm", "DCGM field (id)"), ("nvml", "NVML call"), ("smi_xml", "nvidia-smi XML path"),
    ("smi_query", "`--query-gpu` field"), ("telegraf", "Telegraf field"),
    ("sysfs", "sysfs path"), ("redfish", "Redfish"), ("ipmi", "IPMI"),
)

_TOP = """\
# Metric catalog

<!-- Generated from collectors/catalog.py by `python -m service.commands.docs`; do not edit. -->

Every metric gpuhealth collects, stores, scores or shows is defined once in
`collectors/catalog.py`: its canonical name, unit, kind, scope and how each source spells it.
Parsers, storage, detectors, dashboards and this page are driven by that table. To add a metric,
register it there and run `python -m service.commands.docs` (CI runs it with `--check`).

## Kinds
"""

_SEMANTICS = """\
**Counters stay counters.** Sources report cumulative values and gpuhealth stores them unchanged,
so nothing is lost when a scrape is missed and any window can be re-derived. The *Resets* column
says what a decrease means:

- **yes**: a driver reload, a GPU reset or a reboot zeroes the counter (volatile ECC, PCIe
  replay, NVLink and InfiniBand counters). A decrease is a reset: the rate restarts from the new
  value instead of going negative.
- **no**: the counter is persistent (aggregate ECC, retired pages, remapped rows) and never
  decreases, so a decrease is bad data, not a reset.

InfiniBand port error counters saturate at the width the InfiniBand spec gives them (for example
`link_downed` stops at 255) instead of wrapping; a counter pinned at its maximum has stopped
counting, and only a reset lets it show fresh growth.

**Missing is missing.** A value a source does not report (`N/A` from nvidia-smi, an absent sysfs
file, a failed collector) is stored as NaN with a mask, never as zero, so a dead sensor cannot
look like a healthy one.

**Out of range is refused.** Each metric has the range of values it can physically take (the
*Valid range* column, inclusive; `2^63` is excluded, as an InfluxDB integer cannot hold it).
Ingest refuses a value outside it, whichever source sent it, one value at a time: the rest of
the line is kept, the refusal is counted and its reason names the metric, the value and the
range. A refused value is missing, so a broken sensor or a hostile write cannot fire a rule.

**Derived metrics** are computed from other metrics in the window store and are never ingested,
so they have no source columns. They are marked `derived` in the *Kind* column.

## Scopes
"""

_SOURCES = """\
## Source columns

- **DCGM field (id)**: the `DCGM_FI_*` field name and its numeric id in `dcgm_fields.h`, as
  dcgm-exporter names its series. `<n>` stands for the link number; `& 0x40` means one bit of a
  bitmask field.
- **NVML call**: the NVML function (and enum or struct member) that reads the value.
- **nvidia-smi XML path**: the element path under `<gpu>` in `nvidia-smi -q -x`. Element names
  move between DTD versions and drivers (for example `power_draw` became `instant_power_draw`
  and `clocks_throttle_reasons` became `clocks_event_reasons`); the path given resolves in the
  v12/v13 captures the tests check, and a parser for other drivers needs the other spelling.
- **`--query-gpu` field**: the field for `nvidia-smi --query-gpu=... --format=csv`.
- **Telegraf field**: `measurement.field` as Telegraf's `nvidia_smi` and `infiniband` inputs
  write it. The `infiniband` field is the sysfs counter file name.
- **sysfs path**: for an InfiniBand port relative to `/sys/class/infiniband/<dev>/ports/<port>/`
  (`state` reads like `4: ACTIVE` and `rate` like `400 Gb/sec (4X NDR)`; the leading number is
  the value); for any other scope absolute.
- **Redfish**: the resource under `/redfish/v1/Chassis/<id>/` (or the manager named) and the
  property that reads it (DMTF DSP0266 and the schema bundle DSP8010), the newer
  `PowerSubsystem`/`ThermalSubsystem` resources first and the older `Power`/`Thermal` ones
  in brackets.
- **IPMI**: the IPMI v2.0 sensor type (or SEL record) as `ipmitool sdr elist` and
  `ipmitool sel elist` show it.

A scope's table shows the source columns some metric of the scope has; a dash means the source
does not report the metric.
"""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def _code(value: str | None) -> str:
    return "—" if value is None else f"`{value}`"


def _cell(text: str) -> str:
    # A bare pipe would end the cell early in a Markdown table.
    return text.replace("|", "\\|").replace("\n", " ")


def _kind(metric: Metric) -> str:
    return f"{metric.kind.value}, derived" if metric.derived else metric.kind.value


def _resets(metric: Metric) -> str:
    if metric.kind is not Kind.COUNTER:
        return "—"
    return "yes" if metric.resets else "no"


def _row(metric: Metric, sources: Sequence[str]) -> tuple[str, ...]:
    return (
        f"`{metric.name}`", metric.unit, _kind(metric), _resets(metric), metric.bounds_text,
        metric.description, *(_code(getattr(metric, a)) for a in sources),
    )


def _scope_section(scope: Scope, metrics: Sequence[Metric]) -> str:
    head = f"## {_SCOPES[scope][0]} (`{scope.value}`)\n\n"
    if not metrics:
        return head + "No metrics in this scope yet."
    cols = [(a, h) for a, h in _SOURCE_COLUMNS if any(getattr(m, a) for m in metrics)]
    header = (*_HEADER, *(h for _, h in cols))
    sources = [a for a, _ in cols]
    return head + f"{len(metrics)} metrics.\n\n" + _table(header,
                                                          [_row(m, sources) for m in metrics])


_PROMETHEUS = """\
## Risk on `/metrics` (Prometheus)

Besides the service's own health (ticks, ingest, collectors, notifications by `receiver` and
`integration`, `gpuhealth_remediation_breaker_open`; with replicas
`gpuhealth_cluster_role{role}`, 1 while this replica holds the `writer` or `leader` role, and
with `cluster.membership: postgres` `gpuhealth_cluster_map_epoch`, the shard map in force;
with `diagnostics.enabled` `gpuhealth_diagnostic_runs_total{suite,purpose,status}`, the suites
run (purpose gate, sweep or manual; status pass, fail or error: the test could not run),
`gpuhealth_node_diagnostic_status{node}`, the last result per tested node (0 pass, 1 fail,
2 error), and `gpuhealth_node_repeat_offender{node}`, 1 while a node that failed again soon
after a release needs its hardware replaced, 0 for one that failed again but is not flagged),
`/metrics` carries the newest scoring tick's risk and alert level of every entity, as gauges.
Risk is 0 (healthy) to 1 (failing); the level is 0 none, 1 watch, 2 warning, 3 critical, the
highest open alert of the entity (a GPU gone silent counts on the GPU, no data from a node on
the node). NVLink links are folded into their GPU: one series names the GPU's worst link
(`link`), so a rule on it says which link to look at without 18 series per GPU. Series follow
the tick's entities: a node removed or an entity forgotten after its longest window of silence
leaves the exposition (Prometheus marks it stale), and nothing is emitted before the first
tick. Labels are the store's names only (no UUID or serial, which would start a new series on
every swap). Example recording and alerting rules, with `promtool` unit tests:
`dashboards/prometheus/`. """

_BOARDS = """### The board of a GPU

`gpuhealth_gpu_info` (value 1, one series per GPU whose identity a source said: NVML,
nvidia-smi, dcgm-exporter or Telegraf) names the board in each GPU slot with dcgm-exporter's
label names, `UUID`, `modelName` and `pci_bus_id`, beside `serial`, `vbios` and `driver` (a
label is empty where no source said it). A swap replaces the series; the risk series keep
their names. The joins (tested on a real Prometheus, `tests/runtime/test_prometheus_join.py`):

```promql
# each GPU's risk with its board
gpuhealth_gpu_risk * on(node, gpu) group_left(UUID, modelName, serial) gpuhealth_gpu_info

# dcgm-exporter's series on gpuhealth's node names (under the GPU operator its Hostname is
# the exporter's pod name), joined by the board's UUID
DCGM_FI_DEV_PCIE_REPLAY_COUNTER * on(UUID) group_left(node, serial) gpuhealth_gpu_info
```

No `label_replace` of `Hostname` is needed. The same board is on `/v1/gpus/{gpu}` (`identity`,
with the boards that sat in the slot before), on each GPU or NVLink alert (labels `UUID`,
`serial`, `modelName`, `pci_bus_id`; Alertmanager gets them as annotations, as a board may be
said after its alert opened) and in InfluxDB (`gpu_info`, written when it changes)."""


def _prometheus_section() -> str:
    rows = [(f"`{g.name}`", ", ".join(f"`{lb}`" for lb in g.labels), f"one per {g.per}", g.help)
            for g in GAUGES]
    table = _table(("Gauge", "Labels", "Series", "Meaning"), rows)
    # DGX-class nodes: 8 GPUs with NVLink and one compute IB port per GPU.
    gpus = 10_000
    nodes, ports = gpus // 8, gpus
    # A DGX H100's chassis: 6 power supplies and 12 fans per node.
    psus, fans = 6 * nodes, 12 * nodes
    typical = series_count(gpus, gpus, ports, nodes, psus, fans)
    # ingest's allowance: 2 ports a GPU
    at_limit = series_count(gpus, gpus, 2 * gpus, nodes, psus, fans)
    plural = {"GPU": "GPUs", "GPU with NVLink": "GPUs with NVLink", "IB port": "IB ports",
              "power supply": "power supplies", "fan": "fans", "node": "nodes"}
    per_kind = {per: sum(g.per == per for g in GAUGES) for per in plural}
    formula = " + ".join(f"{k} x {plural[per]}" for per, k in per_kind.items())
    return (_PROMETHEUS + "\n" + table + "\n\n"
            f"**Cardinality.** Series = {formula}. For 10,000 GPUs on {nodes:,} nodes of 8 "
            f"GPUs with NVLink, one InfiniBand port per GPU, 6 power supplies and 12 fans "
            f"per node: **{typical:,} series** "
            f"({typical / gpus:.2f} per GPU); with two ports per GPU (the most "
            f"`ingest.max_gpus` allows for) {at_limit:,}. The service's own series (counts "
            "by scope and level, per detector, histograms) add a few hundred, and each node "
            "agent a few per collector (`gpuhealth_collector_up{host}` and its kin). The "
            "families are built on the first scrape after a tick and reused until "
            "the next, so scraping more often costs only the rendering; drop them with "
            "`metric_relabel_configs` if a Prometheus cannot take them.\n\n" + _BOARDS)


def render_metrics_md(catalog: Catalog = CATALOG) -> str:
    """The whole of docs/metrics.md for `catalog`, in catalog order within each scope."""
    kinds = _table(("Kind", "Meaning", "How it is stored and used"),
                   [(f"`{k.value}`", *_KINDS[k]) for k in Kind])
    scopes = _table(("Scope", "One entity is", "Entity key"),
                    [(f"`{s.value}`", _SCOPES[s][1], f"`{_SCOPES[s][2]}`") for s in Scope])
    sections = [_TOP + "\n" + kinds, _SEMANTICS + "\n" + scopes, _SOURCES.rstrip("\n")]
    for scope in Scope:
        sections.append(_scope_section(scope, [m for m in catalog if m.scope is scope]))
    sections.append(_prometheus_section())
    return "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.commands.docs", description="Regenerate docs/metrics.md."
    )
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if the file differs from the catalog")
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="file to write or check")
    args = parser.parse_args(argv)
    path: Path = args.output
    text = render_metrics_md()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            print(f"{path} is stale: run `python -m service.commands.docs`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
