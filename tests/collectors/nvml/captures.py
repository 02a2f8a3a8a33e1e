"""Captures as catalog values per GPU: the real ones under ../shared/fixtures (read at test time,
skipped when absent) and our own small ones under tests/collectors/captures/ (always there).

The nvidia-smi parsers turn a capture into catalog field names; the NVML stand-in serves those
numbers, so the NVML collector is checked against what real A100s reported.
"""

from __future__ import annotations

import pytest

from collectors.lineprotocol import FieldValue
from collectors.nvidia_smi.textparse import parse_text
from collectors.nvidia_smi.xmlparse import parse_xml
from tests.collectors.nvidia_smi.fixtures import TEXT_DIR, XML_DIR, need, wrapper_string
from tests.collectors.own_captures import SMI_TEXT, SMI_XML, read

A100_TEXT = TEXT_DIR / "thamada-gls-A100SXMx4_smi.py"  # `nvidia-smi -a` held in string out_a
A100_XML = XML_DIR / "telegraf-a100-sxm4-v12.xml"

Gpus = list[dict[str, float]]


def _per_gpu(points_fields: list[tuple[str, dict[str, FieldValue]]]) -> Gpus:
    by_index = {int(gpu): {k: float(v) for k, v in f.items()} for gpu, f in points_fields}
    return [by_index[i] for i in range(len(by_index))]


def a100_text() -> Gpus:
    text = wrapper_string(need(A100_TEXT), "out_a")  # read with ast, never executed
    return _per_gpu([(p.tags["gpu"], p.fields) for p in parse_text(text, "cap", 0)])


def a100_xml() -> Gpus:
    points = parse_xml(need(A100_XML).read_bytes(), "cap", 0)
    return _per_gpu([(p.tags["gpu"], p.fields) for p in points])


def own_a100_text() -> Gpus:
    return _per_gpu([(p.tags["gpu"], p.fields) for p in parse_text(read(SMI_TEXT), "cap", 0)])


def own_h100_xml() -> Gpus:
    return _per_gpu([(p.tags["gpu"], p.fields) for p in parse_xml(read(SMI_XML), "cap", 0)])


CAPTURES = {"a100-text": a100_text, "a100-xml": a100_xml,
            "own-a100-text": own_a100_text, "own-h100-xml": own_h100_xml}


def load(name: str) -> Gpus:
    gpus = CAPTURES[name]()
    if not gpus:
        pytest.fail(f"capture {name} yielded no GPUs")
    return gpus
