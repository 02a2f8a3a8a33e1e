"""PCIe link health from sysfs: link width and speed against their maximum, and AER counters,
for any PCI device (GPUs here, the HCAs through collectors.infiniband)."""

from collectors.pcie.collector import PCI_ROOT, PcieCollector, gpu_devices
from collectors.pcie.sysfs import PcieLink, read_link

__all__ = ["PCI_ROOT", "PcieCollector", "PcieLink", "gpu_devices", "read_link"]
