# dlsched: `make demo` and `make test` each build .venv from the project's own files first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench bench-runtime clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build (a plain or open-ended `torch` pulls gigabytes of CUDA)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched compare --cluster seed002 --workload sample --policies fifo,fifo-gang,fifo-backfill --out out/demo

test: $(STAMP)
	$(BIN)/python -m pytest tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py

bench-runtime: $(STAMP)
	$(BIN)/python benchmarks/bench_runtime.py

clean:
	rm -rf $(VENV) out
