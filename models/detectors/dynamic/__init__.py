"""Tier (b), dynamic thresholds: `DynamicThresholds` (detector.py) runs the rule families, one
module each (memory.py, thermal.py, infiniband.py, nvlink.py), on what they share (levels.py,
baseline.py, hourly.py, family.py)."""

from models.detectors.dynamic.detector import DynamicConfig, DynamicThresholds
from models.detectors.dynamic.hourly import HOUR

__all__ = ["HOUR", "DynamicConfig", "DynamicThresholds"]
