"""nvidia-smi: parsers for its XML, text, CSV and NVLink outputs, and a collector running it."""

from collectors.nvidia_smi.collector import DEFAULT_QUERY_FIELDS, NvidiaSmiCollector
from collectors.nvidia_smi.csvparse import (
    QUERY_FIELDS,
    parse_query_csv,
    parse_query_csv_with_header,
)
from collectors.nvidia_smi.nvlink import looks_like_nvlink_status, parse_nvlink_status
from collectors.nvidia_smi.runner import Runner, RunResult, run_process
from collectors.nvidia_smi.textparse import TEXT_PATHS, parse_text
from collectors.nvidia_smi.values import SmiParseError
from collectors.nvidia_smi.xmlparse import XML_PATHS, parse_xml

__all__ = [
    "DEFAULT_QUERY_FIELDS",
    "QUERY_FIELDS",
    "TEXT_PATHS",
    "XML_PATHS",
    "NvidiaSmiCollector",
    "RunResult",
    "Runner",
    "SmiParseError",
    "looks_like_nvlink_status",
    "parse_nvlink_status",
    "parse_query_csv",
    "parse_query_csv_with_header",
    "parse_text",
    "parse_xml",
    "run_process",
]
