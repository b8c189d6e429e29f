# Two set-up commands: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel on disk; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/supportbench demo

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(VENV)/bin/lint-imports --config pyproject.toml

# pytest exits 5 when it collects no test; make treats any non-zero exit as failure.
test: $(STAMP) lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

bench: $(STAMP)
	for b in bench/[!_]*.py; do echo "== $$b"; OMP_NUM_THREADS=1 $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
