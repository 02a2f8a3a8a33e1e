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
# A MIG page: GPU 0 split in two instances, GPU 1 whole; serial and VBIOS enabled as labels.
DCGM_MIG_PAGE = CAPTURES / "dcgm-exporter" / "metrics-mig-a100.txt"
# One flush of Telegraf's next release (influxdata/telegraf pull requests 19407 and 19455) from a
# GPU node: nvidia_smi in the schema v12 parser's shape with the clocks-event flags and HBM
# temperatures, and its prometheus input (metric_version 2) scraping the GPU operator's
# dcgm-exporter, whose Hostname is its pod name. InfluxDB line protocol as Telegraf writes it.
TELEGRAF_NEXT_FLUSH = CAPTURES / "telegraf" / "flush-nvidia-smi-v12-next.lp"
IB_TTAR = CAPTURES / "infiniband" / "ib-sysfs-2hca.ttar"  # /sys/class/infiniband as ttar
IB_TTAR_ROOT = Path("sys", "class", "infiniband")  # where the tree sits in the archive
IB_ROCE_TTAR = CAPTURES / "infiniband" / "ib-sysfs-roce-gids.ttar"  # RoCE GID tables, iWARP
DMESG_ISO = CAPTURES / "kernel-log" / "dmesg-iso-xid.log"  # dmesg --time-format iso
IPMI_SDR_DELL = CAPTURES / "ipmi" / "sdr-elist-dell.txt"  # ipmitool sdr elist, Dell names
IPMI_SDR_SUPERMICRO = CAPTURES / "ipmi" / "sdr-elist-supermicro.txt"  # ipmitool sdr elist
IPMI_SEL = CAPTURES / "ipmi" / "sel-elist-mixed.txt"  # ipmitool sel elist
# freeipmi: ipmi-sensors --comma-separated-output --output-sensor-thresholds
# --non-abbreviated-units; ipmi-sensors -v (entities); ipmi-sel -v --comma-separated-output
FREEIPMI_SENSORS = CAPTURES / "ipmi" / "freeipmi-sensors-supermicro.csv"
FREEIPMI_VERBOSE = CAPTURES / "ipmi" / "freeipmi-sensors-verbose.txt"
FREEIPMI_SEL = CAPTURES / "ipmi" / "freeipmi-sel.csv"
# Redfish resources (GET /redfish/v1/...), one odd shape each
REDFISH_THERMAL = CAPTURES / "redfish" / "thermal-legacy-percent.json"  # Chassis/*/Thermal
REDFISH_POWER = CAPTURES / "redfish" / "power-legacy-failed.json"  # Chassis/*/Power
REDFISH_FAN_OEM = CAPTURES / "redfish" / "fan-oem-only.json"  # ThermalSubsystem/Fans/*
REDFISH_SEL = CAPTURES / "redfish" / "sel-entries.json"  # Managers/*/LogServices/*/Entries
# GPUs in a bad state: --query-gpu CSV, the default table with ERR!, "No devices were found".
SMI_BAD_CSV = CAPTURES / "nvidia-smi" / "query-gpu-bad-states.csv"
# Identity columns of --query-gpu: a serial printing [Unknown Error], a GPU with [N/A] and an
# unreadable bus id.
SMI_IDENTITY_CSV = CAPTURES / "nvidia-smi" / "query-gpu-identity.csv"
SMI_ERR_TABLE = CAPTURES / "nvidia-smi" / "table-err.txt"
SMI_NO_DEVICES = CAPTURES / "nvidia-smi" / "no-devices.txt"
PCI_DEVICES = CAPTURES / "pcie" / "sys-bus-pci-devices"  # a /sys/bus/pci/devices tree
LSPCI_NODE = CAPTURES / "pcie" / "lspci-vv-h100-node.txt"  # lspci -D -nn -vv (as root)
LSPCI_NONROOT = CAPTURES / "pcie" / "lspci-vv-nonroot.txt"  # lspci -D -nn -vv (not root)
# Host hardware errors: machine checks, EDAC CE/UE and NVSwitch SXids in one dmesg; EDAC sysfs
# trees (/sys/devices/system/edac/mc copied: per-DIMM and legacy csrow views); rasdaemon.
DMESG_HOST_ERRORS = CAPTURES / "kernel-log" / "dmesg-host-errors.log"  # dmesg (uptime stamps)
EDAC_DIMMS = CAPTURES / "edac" / "mc-i10nm"  # two controllers with dimm*/ counts
EDAC_CSROWS = CAPTURES / "edac" / "mc-csrow"  # one controller, csrow*/ch*_ce_count only
RAS_SUMMARY = CAPTURES / "edac" / "ras-mc-ctl-summary.txt"  # ras-mc-ctl --summary


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")

# Active diagnostics (collectors/diagnostics/): each tool's output passing, failing, cut off
# at its time limit and erroring, as a stand-in prints it on a node (tests/support/
# diag_standin.py). Formats: NVIDIA/DCGM dcgmi/Diag.cpp, NVIDIA/nccl-tests src/common.cu and
# src/util.cu, NVIDIA/nvbandwidth output.cpp, wilicc/gpu-burn gpu_burn-drv.cpp.
DIAG = CAPTURES / "diagnostics"
DCGM_R3_PASS = DIAG / "dcgm" / "diag-r3-pass-v4.json"  # dcgmi diag -r 3 -j, DCGM 4.2, 4x H100
DCGM_R3_MEMORY_FAIL = DIAG / "dcgm" / "diag-r3-memory-fail-v4.json"  # GPU 2 memory Fail
DCGM_R3_CUT = DIAG / "dcgm" / "diag-r3-cut-v4.json"  # the same, killed mid-document
DCGM_R2_PCIE_FAIL_V3 = DIAG / "dcgm" / "diag-r2-pcie-fail-v3.json"  # DCGM 3.3 JSON shape
DCGM_R2_PCIE_FAIL_TEXT = DIAG / "dcgm" / "diag-r2-pcie-fail-v4.txt"  # dcgmi diag -r 2 (table)
DCGM_R3_MEMORY_FAIL_TEXT_V3 = DIAG / "dcgm" / "diag-r3-memory-fail-v3.txt"  # 3.x table
DCGM_RUNTIME_ERROR = DIAG / "dcgm" / "diag-runtime-error-v4.json"  # {"runtime_error": ...}
DCGM_HOSTENGINE_ERROR = DIAG / "dcgm" / "diag-hostengine-error.txt"  # no host engine
NCCL_PASS = DIAG / "nccl" / "all-reduce-8xh100-pass.txt"  # all_reduce_perf -b 8 -e 8G -f 2 -g 8
NCCL_SLOW = DIAG / "nccl" / "all-reduce-8xh100-slow.txt"  # 251 GB/s peak bus bandwidth
NCCL_WRONG = DIAG / "nccl" / "all-reduce-8xh100-wrong-v2.13.txt"  # #wrong > 0, older format
NCCL_KILLED = DIAG / "nccl" / "all-reduce-8xh100-killed.txt"  # stops after 256 MB
NCCL_KILLED_WRONG = DIAG / "nccl" / "all-reduce-8xh100-killed-wrong.txt"  # cut, wrong at 64 MB
NCCL_ERROR = DIAG / "nccl" / "all-reduce-nccl-error.txt"  # "Test NCCL failure"
NCCL_MPI_ERROR = DIAG / "nccl" / "all-reduce-mpi-launch-error.txt"  # mpirun could not launch
NVB_PASS = DIAG / "nvbandwidth" / "ce-8xh100-pass.txt"  # h2d, d2h, d2d read; 8x H100
NVB_SLOW_LINK = DIAG / "nvbandwidth" / "ce-8xh100-slow-link.txt"  # GPU 2 <-> 5 at 118 GB/s
NVB_KILLED = DIAG / "nvbandwidth" / "ce-8xh100-killed.txt"  # cut inside the d2d matrix
NVB_WAIVED = DIAG / "nvbandwidth" / "ce-1xh100-waived.txt"  # one GPU: d2d "Waived: "
NVB_CUDA_ERROR = DIAG / "nvbandwidth" / "cuda-no-device.txt"  # [CUDA_ERROR_NO_DEVICE]
BURN_OK = DIAG / "gpu-burn" / "8xh100-ok.txt"  # gpu_burn 60, 8x OK
BURN_FAULTY = DIAG / "gpu-burn" / "8xh100-faulty.txt"  # GPU 3 errors, FAULTY
BURN_KILLED_ERRORS = DIAG / "gpu-burn" / "8xh100-killed-errors.txt"  # cut, GPU 5 errors
BURN_INIT_ERROR = DIAG / "gpu-burn" / "init-error.txt"  # out of memory, no client alive
