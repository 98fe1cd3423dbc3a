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

# Two pytest-xdist workers, a test file each at a time (its module fixtures built once): about
# half the suite's time is one core's (exports, torch.compile, imports), so two workers keep this
# machine's two cores busy; TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

clean:
	rm -rf artifacts/* .doit.db* && touch artifacts/.gitkeep
