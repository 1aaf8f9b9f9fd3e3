# dlsched: `make demo` and `make test` each build .venv from the project's own files first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser promtool demo test docs property bench bench-runtime soak clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build (a plain or open-ended `torch` pulls gigabytes of CUDA)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	# the simulator's compiled loop (sim/fastloop.py) compiled now, into numba's cache beside the
	# sources (about 20 s), not at the first long run or test that takes it
	$(BIN)/python -c "from dlsched.sim import fastloop; print(f'compiled loop: {fastloop.warm():.1f} s')"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched compare --cluster seed002 --workload sample --policies fifo,fifo-gang,fifo-backfill --out out/demo --force

# headless Chromium for tests/runtime/test_api_docs_browser.py (/docs rendered offline) and
# tests/runtime/test_web_view.py (the web view); installed with apt where missing, as root or via
# non-interactive sudo. Where neither works, only a warning: those tests then skip locally and
# fail in CI (CI=true), so CI still cannot pass without them.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  command -v apt-get >/dev/null && { [ -z "$$SUDO" ] || command -v sudo >/dev/null; } && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq chromium' \
	  || echo "warning: chromium not installed (needs apt-get and root or sudo)" >&2; }

# Prometheus's linter for tests/runtime/test_metrics.py (`promtool check metrics` on the real
# /metrics page): Debian's `prometheus` ships /usr/bin/promtool (without its recommended
# node exporter); installed with apt where missing, as root or via non-interactive sudo, as
# `browser` does. Where neither works, only a warning: the test then skips locally and fails in
# CI (CI=true).
promtool:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  command -v apt-get >/dev/null && { [ -z "$$SUDO" ] || command -v sudo >/dev/null; } && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus' \
	  || echo "warning: promtool not installed (needs apt-get and root or sudo)" >&2; }

# two xdist workers: the runtime's tests on its shared Ray cluster run in one of them, one after
# another; the tests that start a Ray of their own in the other (tests/conftest.py); the rest are
# spread over both
test: $(STAMP) browser promtool
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site
	$(BIN)/python -m pytest tests -n 2 --durations=15

# the docs site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt on every change; `make test`
# builds it with --strict (a broken link, anchor or a page missing from the nav fails) into site/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# the Hypothesis properties at 10,000 examples each (make test runs 500)
property: $(STAMP)
	DLSCHED_HYPOTHESIS=property $(BIN)/python -m pytest tests/property

# the simulator's goals (issue "Scale"), each writing its block of benchmarks/RESULTS.md: fifo on
# Philly and Pollux, every policy on Philly, one placement round, one Optimus round, sweeps on a
# 2-node Ray cluster; the last prints the cost-growth table (jobs/s at 10k, 100k and 1M jobs, low
# and high concurrency)
# the deep-queue cases of issue "Scale on a real network and under deep queues"
DEEP = fifo,tiresias,srtf,tetris,drf,sjf,fifo-backfill,edf,k8s-spread

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_policies.py
	$(BIN)/python benchmarks/bench_policies.py --deep --policies $(DEEP)
	$(BIN)/python benchmarks/bench_policies.py --deep --queues 8 --tenancy kueue --policies $(DEEP)
	$(BIN)/python benchmarks/bench_round.py --tasks 100000 --nodes 5000
	$(BIN)/python benchmarks/bench_optimus.py --jobs 4000 --nodes 16000
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_scale.py --million

bench-runtime: $(STAMP)
	$(BIN)/python benchmarks/bench_runtime.py

# chaos soak, not in CI (tests/runtime/test_chaos.py is the short version): 2,000 jobs submitted
# through the REST API while the server, rank workers and nodes are killed every ~30 s; writes
# its block into benchmarks/RESULTS.md. Short jobs (10-20 steps of 0.1 s) on 4 nodes: the 2,000
# submissions took 26 minutes on 2 cores.
soak: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --jobs 2000 --nodes 4 --kill-every-s 30 --steps 10,20 --step-s 0.1 --seed 7 --out out/soak --results --block soak

clean:
	rm -rf $(VENV) out
