"""Fleet simulator: synthetic GPU-cluster telemetry with labelled failures and benign traps,
following a failure model grounded in published field studies; docs/simulator.md gives every
source."""

from models.simulator.config import SimConfig
from models.simulator.modes import Mode
from models.simulator.scenarios import PRESETS, load_scenario
from models.simulator.simulator import Simulator, failure_times
from models.simulator.writer import TraceSummary, write_trace

__all__ = [
    "PRESETS",
    "Mode",
    "SimConfig",
    "Simulator",
    "TraceSummary",
    "failure_times",
    "load_scenario",
    "write_trace",
]
