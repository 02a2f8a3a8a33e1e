"""dcgm-exporter as a source: its Prometheus page parsed onto the metric catalog."""

from collectors.dcgm.collector import DcgmExporterCollector, XidTracker
from collectors.dcgm.exposition import ExpositionError, ParseStats, parse_exposition
from collectors.dcgm.fields import FIELDS, FieldMap

__all__ = [
    "FIELDS",
    "DcgmExporterCollector",
    "ExpositionError",
    "FieldMap",
    "ParseStats",
    "XidTracker",
    "parse_exposition",
]
