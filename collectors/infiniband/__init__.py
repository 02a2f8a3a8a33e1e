"""InfiniBand ports as a source: the sysfs tree under /sys/class/infiniband, or the `ibstat`
tool where sysfs cannot be read."""

from collectors.infiniband.collector import DEFAULT_ROOT, InfinibandCollector
from collectors.infiniband.flaps import SATURATION, FlapTracker, increase
from collectors.infiniband.ibstat import IbstatResult, parse_ibstat
from collectors.infiniband.ibstat_collector import IbstatCollector
from collectors.infiniband.sysfs import PortReading, read_ports, read_sysfs, to_point
from collectors.infiniband.ttar import unpack_ttar

__all__ = [
    "DEFAULT_ROOT",
    "SATURATION",
    "FlapTracker",
    "IbstatCollector",
    "IbstatResult",
    "InfinibandCollector",
    "PortReading",
    "increase",
    "parse_ibstat",
    "read_ports",
    "read_sysfs",
    "to_point",
    "unpack_ttar",
]
