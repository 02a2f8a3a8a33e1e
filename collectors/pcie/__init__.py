"""PCIe link health from sysfs (or `lspci -vv` where sysfs is not readable): link width and speed
against their maximum, and AER counters, for any PCI device (GPUs here, the HCAs through
collectors.infiniband)."""

from collectors.pcie.collector import PCI_ROOT, PcieCollector, gpu_devices
from collectors.pcie.lspci import LspciDevice, parse_lspci
from collectors.pcie.sysfs import PcieLink, read_link

__all__ = ["PCI_ROOT", "LspciDevice", "PcieCollector", "PcieLink", "gpu_devices", "parse_lspci",
           "read_link"]
