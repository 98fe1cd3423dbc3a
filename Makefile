# Two commands on a fresh machine: `make build`, then `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# iree-turbine's JIT path and our compile step call iree-compile by name.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install build lint test clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: on these machines this takes the local CPU build.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[build,dask,test,lint]'
	touch $(STAMP)

install: $(STAMP)

build: install
	$(VENV)/bin/doit build

# ruff (pyflakes, import order) and mypy; configured in pyproject.toml
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# One process by default: on the two-core CI kind of machine two pytest-xdist workers took longer
# (932-957 s against 870 s), the builds already using both cores and the benchmarks measuring again
# while the other worker loads the machine. More cores: TEST_WORKERS=N (a test file per worker at a time)
TEST_WORKERS ?= 0
test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

clean:
	rm -rf artifacts/* .doit.db* && touch artifacts/.gitkeep
