# `make test` is the project's one test command (README, .ci/run): it creates .venv, installs rltrace
# (a real wheel build, not an editable install, so tests see what users get) with its test extras, and runs
# pytest (the console script: `python -m pytest` would put the source tree on sys.path ahead of the
# installed package). It never installs a loose torch.
PYTHON ?= python3
VENV ?= .venv

.PHONY: test bench

test:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet ".[test]"
	$(VENV)/bin/pytest

bench:
	$(VENV)/bin/python benchmarks/bundle_io.py
