"""Host memory errors from the kernel's EDAC driver (sysfs) and rasdaemon's `ras-mc-ctl`."""

from collectors.edac.collector import EdacCollector
from collectors.edac.rasdaemon import looks_like_summary, parse_summary
from collectors.edac.sysfs import EDAC_ROOT, DimmCounts, EdacReading, McCounts, read_edac

__all__ = [
    "EDAC_ROOT",
    "DimmCounts",
    "EdacCollector",
    "EdacReading",
    "McCounts",
    "looks_like_summary",
    "parse_summary",
    "read_edac",
]
