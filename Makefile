# `make demo` and `make test` create the virtual environment and install the pinned
# dependencies on first use (torch pinned to the CPU wheel through constraints.txt).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint bench docs dashboards serve agent-binary clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt
	# setuptools 80+ prints a BuildBackendWarning on every editable install of a flat layout
	# ("folders ... with the same name as your package may take precedence"): a notice about
	# editable installs in general, not about this project; everything else stays visible.
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install -q --no-deps -e .
	touch $@

demo: $(STAMP)
	$(VENV)/bin/gpuhealth demo

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The inner loop: everything but the tests marked slow (a second or more: servers, benches,
# replays), on one worker per core (pytest-xdist); a test file stays on one worker, so a
# module's served app or browser starts once (not loadgroup: pytest 9.2 drops its grouping).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n auto --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check collectors models service bench tests
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench.pipeline

docs: $(STAMP)
	$(PY) -m service.commands.docs

dashboards: $(STAMP)
	$(PY) -m service.grafana

serve: $(STAMP)
	$(VENV)/bin/gpuhealth serve

# The node agent as one self-contained executable, dist/gpuhealth-agent (PyInstaller; no Python
# needed on the node): `python -m bench.agent_binary` also prints its size and memory.
agent-binary: $(STAMP)
	$(PY) -m bench.agent_binary build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
