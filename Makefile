# Two commands do all the set-up from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --disable-pip-version-check -q -c constraints/dev.txt
SCENARIO ?=

.PHONY: demo test lint bench fuzz soak clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.demo-installed: pyproject.toml constraints/dev.txt | $(PY)
	$(PIP) -e '.[demo]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml constraints/dev.txt | $(PY)
	$(PIP) -e '.[dev]'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(VENV)/bin/trainmon demo $(if $(SCENARIO),--scenario $(SCENARIO))

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check trainmon tests testsupport benchmarks scripts
	$(VENV)/bin/ruff format --check trainmon tests testsupport benchmarks scripts
	$(VENV)/bin/mypy trainmon
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: $(VENV)/.dev-installed
	$(PY) benchmarks/run_all.py

# Longer fuzzing of the protocol decoder and the recording reader (FUZZ_SECONDS each).
FUZZ_SECONDS ?= 300
fuzz: $(VENV)/.dev-installed
	$(PY) benchmarks/fuzz.py --seconds $(FUZZ_SECONDS)

# 30 minutes of agents coming and going under `trainmon record`: flat RSS, descriptors, threads.
SOAK_SECONDS ?= 1800
soak: $(VENV)/.dev-installed
	$(PY) benchmarks/soak.py --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(VENV) build *.egg-info
