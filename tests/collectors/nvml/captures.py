"""Captures as catalog values per GPU: the real ones under ../shared/fixtures (read at test time,
skipped when absent) and our own small ones under tests/collectors/captures/ (always there).

The nvidia-smi parsers turn a capture into catalog field names; the NVML stand-in serves those
numbers, so the NVML collector is checked against what real A100s reported; `identity` gives
the same captures' GPU identities (UUID, serial, bus id, name, VBIOS) and driver for it to serve.
"""

from __future__ import annotations

import pytest

from collectors import identity as ident
from collectors.lineprotocol import FieldValue, Point
from collectors.nvidia_smi.textparse import parse_text
from collectors.nvidia_smi.xmlparse import parse_xml
from tests.collectors.nvidia_smi.fixtures import TEXT_DIR, XML_DIR, need, wrapper_string
from tests.collectors.own_captures import SMI_TEXT, SMI_XML, read

A100_TEXT = TEXT_DIR / "thamada-gls-A100SXMx4_smi.py"  # `nvidia-smi -a` held in string out_a
A100_XML = XML_DIR / "telegraf-a100-sxm4-v12.xml"

Gpus = list[dict[str, float]]


def _fields(points: list[Point], measurement: str = "gpu") -> list[tuple[str, dict[str,
                                                                               FieldValue]]]:
    return [(p.tags["gpu"], p.fields) for p in points if p.measurement == measurement]


def _per_gpu(points_fields: list[tuple[str, dict[str, FieldValue]]]) -> Gpus:
    by_index = {int(gpu): {k: float(v) for k, v in f.items()} for gpu, f in points_fields}
    return [by_index[i] for i in range(len(by_index))]


def _points(name: str) -> list[Point]:
    if name == "a100-text":  # `nvidia-smi -a` held in a python wrapper, read with ast
        return parse_text(wrapper_string(need(A100_TEXT), "out_a"), "cap", 0)
    if name == "a100-xml":
        return parse_xml(need(A100_XML).read_bytes(), "cap", 0)
    if name == "own-a100-text":
        return parse_text(read(SMI_TEXT), "cap", 0)
    return parse_xml(read(SMI_XML), "cap", 0)


CAPTURES = ("a100-text", "a100-xml", "own-a100-text", "own-h100-xml")


def load(name: str) -> Gpus:
    gpus = _per_gpu(_fields(_points(name)))
    if not gpus:
        pytest.fail(f"capture {name} yielded no GPUs")
    return gpus


def a100_text() -> Gpus:
    return load("a100-text")


def a100_xml() -> Gpus:
    return load("a100-xml")


def own_a100_text() -> Gpus:
    return load("own-a100-text")


def own_h100_xml() -> Gpus:
    return load("own-h100-xml")


def identity(name: str) -> tuple[list[dict[str, str]], str]:
    """Per GPU, the identity the capture shows (FIELDS names, the driver apart), and the
    driver's version."""
    infos = dict(_fields(_points(name), ident.MEASUREMENT))
    per_gpu = [{k: str(v) for k, v in infos[str(i)].items()} for i in range(len(infos))]
    drivers = {g.pop("driver") for g in per_gpu}
    if len(drivers) != 1:
        pytest.fail(f"capture {name} names {len(drivers)} drivers")
    return per_gpu, drivers.pop()
