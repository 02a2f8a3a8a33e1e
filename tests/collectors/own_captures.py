"""Small captures this project wrote itself, under tests/collectors/captures/.

Each is our own text in the exact shape of a real tool's output (hosts, values and row counts
are ours, not a copy of any fixture), so every parser is tested in a fresh clone too. The real
captures in ../shared/fixtures stay the thorough tests, read in place; captures/README.md says
what each file here shows.
"""

from __future__ import annotations

from pathlib import Path

CAPTURES = Path(__file__).resolve().parent / "captures"

SMI_TEXT = CAPTURES / "nvidia-smi" / "query-a100x2.txt"  # nvidia-smi -q, 2x A100-SXM4-40GB
SMI_XML = CAPTURES / "nvidia-smi" / "query-x-h100x2-v12.xml"  # nvidia-smi -q -x, DTD v12
SMI_NVLINK = CAPTURES / "nvidia-smi" / "nvlink-status-h100x2.txt"  # nvidia-smi nvlink --status
DCGM_PAGE = CAPTURES / "dcgm-exporter" / "metrics-h100x2.txt"  # curl :9400/metrics
IB_TTAR = CAPTURES / "infiniband" / "ib-sysfs-2hca.ttar"  # /sys/class/infiniband as ttar
IB_TTAR_ROOT = Path("sys", "class", "infiniband")  # where the tree sits in the archive
IB_ROCE_TTAR = CAPTURES / "infiniband" / "ib-sysfs-roce-gids.ttar"  # RoCE GID tables, iWARP
DMESG_ISO = CAPTURES / "kernel-log" / "dmesg-iso-xid.log"  # dmesg --time-format iso
IPMI_SDR_DELL = CAPTURES / "ipmi" / "sdr-elist-dell.txt"  # ipmitool sdr elist, Dell names
IPMI_SDR_SUPERMICRO = CAPTURES / "ipmi" / "sdr-elist-supermicro.txt"  # ipmitool sdr elist
IPMI_SEL = CAPTURES / "ipmi" / "sel-elist-mixed.txt"  # ipmitool sel elist
# Redfish resources (GET /redfish/v1/...), one odd shape each
REDFISH_THERMAL = CAPTURES / "redfish" / "thermal-legacy-percent.json"  # Chassis/*/Thermal
REDFISH_POWER = CAPTURES / "redfish" / "power-legacy-failed.json"  # Chassis/*/Power
REDFISH_FAN_OEM = CAPTURES / "redfish" / "fan-oem-only.json"  # ThermalSubsystem/Fans/*
REDFISH_SEL = CAPTURES / "redfish" / "sel-entries.json"  # Managers/*/LogServices/*/Entries
# GPUs in a bad state: --query-gpu CSV, the default table with ERR!, "No devices were found".
SMI_BAD_CSV = CAPTURES / "nvidia-smi" / "query-gpu-bad-states.csv"
SMI_ERR_TABLE = CAPTURES / "nvidia-smi" / "table-err.txt"
SMI_NO_DEVICES = CAPTURES / "nvidia-smi" / "no-devices.txt"
PCI_DEVICES = CAPTURES / "pcie" / "sys-bus-pci-devices"  # a /sys/bus/pci/devices tree
# Host hardware errors: machine checks, EDAC CE/UE and NVSwitch SXids in one dmesg; EDAC sysfs
# trees (/sys/devices/system/edac/mc copied: per-DIMM and legacy csrow views); rasdaemon.
DMESG_HOST_ERRORS = CAPTURES / "kernel-log" / "dmesg-host-errors.log"  # dmesg (uptime stamps)
EDAC_DIMMS = CAPTURES / "edac" / "mc-i10nm"  # two controllers with dimm*/ counts
EDAC_CSROWS = CAPTURES / "edac" / "mc-csrow"  # one controller, csrow*/ch*_ce_count only
RAS_SUMMARY = CAPTURES / "edac" / "ras-mc-ctl-summary.txt"  # ras-mc-ctl --summary


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")
