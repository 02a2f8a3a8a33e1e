"""GPU health read directly from NVML through pynvml (nvidia-ml-py)."""

from collectors.nvml.collector import NvmlCollector

__all__ = ["NvmlCollector"]
