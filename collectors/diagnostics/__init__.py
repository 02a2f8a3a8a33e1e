"""Active diagnostics, the service-free half: a suite's result (`result.py`), its settings
(`settings.py`), one parser per tool's real output (`dcgm.py`, `nccl.py`, `nvbandwidth.py`,
`gpu_burn.py`, named in `parsers.py`) and the verdict against the expected figures of the
node's GPU model (`verdict.py`). Running a suite, storing and alerting live in the service."""
