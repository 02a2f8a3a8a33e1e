"""Inputs for bench.collectors built at run time from the real captures in ../shared/fixtures.

Nothing here is copied into the repository: each builder reads a capture and scales it to an
8-GPU node (replicated GPU blocks, rows or samples, each with its own index and bus id).
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures"
GPUS = 8

H100_CAPTURE = (FIXTURES / "nvidia-smi-text"
                / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt")
H100_TEXT = FIXTURES / "nvidia-smi-text" / "gpud-nvidia-smi-query.535.183.01.out.0.valid"
A100_XML = FIXTURES / "nvidia-smi-xml" / "telegraf-a100-sxm4-v12.xml"
L4_PAGE = FIXTURES / "dcgm-exporter" / "k8s-ai-conformance-kops-L4-dcgm-output.md"
IB_H100 = FIXTURES / "infiniband-sysfs" / "gpud-sys-class-infiniband-h100.0"
XID_LOGS = (FIXTURES / "xid-logs" / "gpud-dmesg-time-format-iso-xid48-63-94.log",
            FIXTURES / "xid-logs" / "gpud-dmesg.decode.iso.log.0-xid13-43.log")

# The capture predates the rename of clocks_throttle_reasons.* to clocks_event_reasons.*.
_ALIASES = {"clocks_throttle_reasons.": "clocks_event_reasons."}


def available() -> bool:
    return FIXTURES.is_dir()


def h100_query_row() -> dict[str, str]:
    """The under-load `--query-gpu` CSV row of the H100 capture, by field name."""
    lines = H100_CAPTURE.read_text(errors="replace").splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("# load :: query-gpu"))
    rows = [s for s in lines[start + 1:] if s and not s.startswith("#")][:2]
    head = [c.strip().split(" [")[0] for c in rows[0].split(",")]
    vals = [c.strip() for c in rows[1].split(",")]
    return dict(zip(head, vals, strict=False))


def narrow_csv(fields: tuple[str, ...], gpus: int = GPUS) -> str:
    """`--query-gpu=<fields> --format=csv,noheader,nounits` of an 8-GPU node, from the
    H100 capture's values (units stripped), one row per GPU with its own index."""
    row = h100_query_row()
    out = []
    for g in range(gpus):
        cells = []
        for f in fields:
            name = f
            for old, new in _ALIASES.items():
                name = name.replace(old, new)
            v = str(g) if f == "index" else row.get(name, "[N/A]")
            cells.append(v.split(" ")[0] if v[:1].isdigit() else v)
        out.append(", ".join(cells))
    return "\n".join(out) + "\n"


def a100_xml(gpus: int = GPUS) -> str:
    """`nvidia-smi -q -x` of an 8-GPU node: the A100 capture's one <gpu> block, 8 times, each
    with its own PCI bus id and minor number."""
    text = A100_XML.read_text()
    a, b = text.index("<gpu id="), text.rindex("</gpu>") + len("</gpu>")
    block = text[a:b]
    blocks = []
    for g in range(gpus):
        bus = f"00000000:{0x10 + g:02X}:00.0"
        blk = re.sub(r'<gpu id="[^"]*">', f'<gpu id="{bus}">', block, count=1)
        blk = re.sub(r"<minor_number>\d+</minor_number>", f"<minor_number>{g}</minor_number>",
                     blk)
        blocks.append(blk)
    head = re.sub(r"<attached_gpus>\d+</attached_gpus>", f"<attached_gpus>{gpus}</attached_gpus>",
                  text[:a])
    return head + "\n    ".join(blocks) + text[b:]


def l4_page(gpus: int = GPUS) -> str:
    """dcgm-exporter's /metrics of an 8-GPU node: the L4 capture's page (unwrapped from its
    Markdown) with every sample repeated per GPU under its own gpu, UUID, bus id and device."""
    lines = L4_PAGE.read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("# HELP DCGM_FI"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    out: list[str] = []
    for s in lines[start:end]:
        if not s.startswith("DCGM_FI"):
            if s:
                out.append(s)
            continue
        for g in range(gpus):
            t = re.sub(r'gpu="\d+"', f'gpu="{g}"', s)
            t = re.sub(r'UUID="GPU-[0-9a-f]{8}', f'UUID="GPU-{g:08x}', t)
            t = re.sub(r'pci_bus_id="[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}',
                       f'pci_bus_id="00000000:{0x10 + g:02X}', t)
            t = re.sub(r'device="nvidia\d+"', f'device="nvidia{g}"', t)
            out.append(t)
    return "\n".join(out) + "\n"


def xid_lines() -> list[str]:
    """The real NVRM Xid lines of the kernel-log captures."""
    return [s for p in XID_LOGS for s in p.read_text(errors="replace").splitlines()
            if "NVRM: Xid" in s]


def kernel_log_lines() -> list[str]:
    """Every line of the larger dmesg capture (Xid lines among the rest)."""
    return XID_LOGS[1].read_text(errors="replace").splitlines()
