"""InfiniBand ports as a source: the sysfs tree under /sys/class/infiniband."""

from collectors.infiniband.collector import DEFAULT_ROOT, InfinibandCollector
from collectors.infiniband.flaps import SATURATION, FlapTracker, increase
from collectors.infiniband.sysfs import PortReading, read_ports, read_sysfs, to_point
from collectors.infiniband.ttar import unpack_ttar

__all__ = [
    "DEFAULT_ROOT",
    "SATURATION",
    "FlapTracker",
    "InfinibandCollector",
    "PortReading",
    "increase",
    "read_ports",
    "read_sysfs",
    "to_point",
    "unpack_ttar",
]
