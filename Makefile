# `make test` is the project's one test command (README, .ci/run): it creates .venv, installs rltrace
# (a real wheel build, not an editable install, so tests see what users get) with its test extras, and runs
# pytest. It never installs a loose torch.
PYTHON ?= python3
VENV ?= .venv

.PHONY: test bench

test:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet ".[test]"
	$(VENV)/bin/python -m pytest

bench:
	$(VENV)/bin/python benchmarks/bundle_io.py
