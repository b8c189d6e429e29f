# Two set-up commands: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
UV     := $(VENV)/bin/uv
UV_VERSION := 0.13.8

.PHONY: demo test lint bench clean lock browser

# Installs from the lock: every dependency at the version the project was tested with. pyproject.toml
# keeps the declared ranges for users who install supportbench into their own environment.
# torch first, pinned, by pip: the CPU wheel on disk (in pip's configured find-links, which uv does not
# read); an unpinned torch pulls a multi-GB CUDA build. The rest by uv (pinned too): the lock's 73
# packages in some 7 s where pip took 90 s here (its resolver and unpacking, in Python); a fresh .venv
# took 112 s by pip alone, 49 s so, of `make test`'s 8-minute budget.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0 uv==$(UV_VERSION)
	$(UV) pip install -q --python $(PY) -r $(LOCK)
	$(UV) pip install -q --python $(PY) --no-deps -e .
	touch $(STAMP)

# Re-resolve the declared ranges in a fresh environment and write the versions it got into the lock.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q torch==2.13.0
	.lock-venv/bin/pip install -q -e ".[test]"
	{ echo "# Every dependency of supportbench[test] at the version this project is tested with, except torch"; \
	  echo "# (installed first by the Makefile: torch==2.13.0, the CPU wheel). Regenerate with \`make lock\`."; \
	  .lock-venv/bin/pip freeze --exclude-editable | grep -v -i -e '^torch==' -e '^-e' -e '^supportbench'; } > $(LOCK)
	rm -rf .lock-venv

demo: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/supportbench demo

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m ruff format --check src tests bench examples
	$(VENV)/bin/lint-imports --config pyproject.toml

# pytest exits 5 when it collects no test; make treats any non-zero exit as failure. The suite runs on every
# core (pytest-xdist, one torch thread per worker); tests that share a resource run on one worker, in turn
# (``xdist_group``: the one-node Slurm, the process-killing tests, each integration module's theta_0; it
# needs pytest < 9 with xdist 3.8, and tests/conftest.py refuses to run ungrouped). TEST_WORKERS=0: this process.
TEST_WORKERS ?= auto
# The environment and the browser are made side by side (pip and uv on one core, apt-get on the other).
test:
	@$(MAKE) -f $(firstword $(MAKEFILE_LIST)) --no-print-directory -j2 $(STAMP) browser
	@$(MAKE) -f $(firstword $(MAKEFILE_LIST)) --no-print-directory lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Headless Chromium for the report page's browser test (tests/integration/test_report_browser.py),
# best effort: installed where apt-get works (root on Debian/Ubuntu; about 35 s; the package lists
# refreshed once if the first try fails), else that test is
# skipped. A failed install never fails `make test`.
browser:
	@command -v chromium >/dev/null || timeout 300 apt-get install -y -q chromium >/dev/null 2>&1 \
	  || { timeout 120 apt-get update -q >/dev/null 2>&1 \
	       && timeout 300 apt-get install -y -q chromium >/dev/null 2>&1; } \
	  || echo "chromium not installed: the browser test will be skipped"

bench: $(STAMP)
	for b in bench/[!_]*.py; do echo "== $$b"; OMP_NUM_THREADS=1 $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .lock-venv .pytest_cache build src/*.egg-info
