"""Every name the collector uses exists in the real pynvml, spelt the same."""

from __future__ import annotations

import inspect

import pynvml

from collectors.nvml.api import NvmlApi
from tests.collectors.nvml.fake import FakeNvml


def _names() -> set[str]:
    annotated = set(inspect.get_annotations(NvmlApi))
    methods = {n for n, v in vars(NvmlApi).items() if inspect.isfunction(v)}
    return annotated | methods


def test_protocol_names_exist_in_pynvml() -> None:
    missing = sorted(n for n in _names() if not hasattr(pynvml, n))
    assert missing == []


def test_stand_in_implements_the_protocol() -> None:
    fake = FakeNvml([])
    missing = sorted(n for n in _names() if not hasattr(fake, n))
    assert missing == []
