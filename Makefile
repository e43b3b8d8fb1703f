# pgqueue developer commands. `make help` lists them.
# Everything runs from a virtualenv in $(VENV), created and filled on first use.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PYTHONDONTWRITEBYTECODE := 1

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev,demo,docs]'
	touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create the virtualenv and install pgqueue with every extra

.PHONY: generate
generate: $(STAMP) ## Regenerate the sync twin from the async sources
	$(PY) tools/async_to_sync.py

.PHONY: check-generated
check-generated: $(STAMP) ## Fail if the generated sync code is out of date
	$(PY) tools/async_to_sync.py --check

.PHONY: lint
lint: $(STAMP) ## Run ruff (lint and format check)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

.PHONY: format
format: $(STAMP) ## Format the code with ruff, then regenerate
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
	$(PY) tools/async_to_sync.py

.PHONY: typecheck
typecheck: $(STAMP) ## Run mypy --strict on the package
	$(VENV)/bin/mypy

# The main suite runs in TEST_WORKERS processes (pytest-xdist; each has a database of its own):
# its tests mostly wait on PostgreSQL and on subprocesses, so three beat two on 2 cores (about
# 8 min against 11; in one: 19). TEST_WORKERS=0 runs it in the pytest process itself.
# loadfile: each test module runs in one process, so its module-scoped fixtures (servers,
# browsers, builds) start once. (Not loadgroup: pytest-xdist 3.8 ignores xdist_group marks on
# pytest 9.2, pytest-dev/pytest-xdist#1386; tests/conftest.py's many_connections keeps the
# tests that open tens of connections from running at the same time.)
TEST_WORKERS ?= 3

.PHONY: test
test: $(STAMP) ## Run the test suite against PostgreSQL (see PGQUEUE_TEST_DSN in the README)
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

.PHONY: test-faults
test-faults: $(STAMP) ## Run the fault-injection suite (real processes; restarts the local PostgreSQL)
	$(VENV)/bin/pytest -q -m faults tests/faults $(PYTEST_ARGS)

.PHONY: check
check: check-generated lint typecheck docs test check-dist ## Everything CI runs, but the fault suite (make test-faults)

.PHONY: demo
demo: $(STAMP) ## Run the demo: real jobs on $$PGQUEUE_DSN, or on a throwaway PostgreSQL
	$(PY) -m pgqueue demo

.PHONY: sql
sql: $(STAMP) ## Print the schema SQL (pgqueue sql)
	$(PY) -m pgqueue sql

BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp

$(BENCH_STAMP): pyproject.toml benchmarks/requirements.txt
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[all,web]' -r benchmarks/requirements.txt
	touch $(BENCH_STAMP)

.PHONY: bench
bench: $(BENCH_STAMP) ## Benchmarks vs PGQueuer, procrastinate and pgbench (~1 h 15 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.run $(BENCH_ARGS)
	$(BENCH_VENV)/bin/python -m benchmarks.report

.PHONY: bench-quick
bench-quick: $(BENCH_STAMP) ## A few-minute smoke run of the benchmarks (not for numbers)
	$(BENCH_VENV)/bin/python -m benchmarks.run --quick $(BENCH_ARGS)

.PHONY: bench-sweep
bench-sweep: $(BENCH_STAMP) ## Each library's drain at concurrency 10-500: the best concurrency of later runs (~10 min)
	$(BENCH_VENV)/bin/python -m benchmarks.run --scenarios sweep $(BENCH_ARGS)

.PHONY: bench-admin
bench-admin: $(BENCH_STAMP) ## Admin API reads on 1M finished + 100k pending jobs (~1 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.admin_queries $(BENCH_ARGS)

.PHONY: bench-web
bench-web: $(BENCH_STAMP) ## The dashboard's jobs page on 1M finished + 100k pending jobs, over HTTP (~30 s; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.web_jobs_page $(BENCH_ARGS)

.PHONY: bench-copy-threshold
bench-copy-threshold: $(BENCH_STAMP) ## INSERT of arrays vs COPY per driver mode and batch size: where COPY_MIN belongs (~5 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.copy_threshold $(BENCH_ARGS)

.PHONY: bench-enqueue-profile
bench-enqueue-profile: $(BENCH_STAMP) ## Where an enqueue's time goes: wall, client CPU, server CPU per job, and a profile (~2 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.enqueue_profile $(BENCH_ARGS)

.PHONY: bench-claim-plan
bench-claim-plan: $(BENCH_STAMP) ## The claim statement alone, no history vs 1M finished rows: timings and EXPLAIN (~1 min)
	$(BENCH_VENV)/bin/python -m benchmarks.claim_plan

.PHONY: bench-observability
bench-observability: $(BENCH_STAMP) ## Drain cost of the events seam, Prometheus, OpenTelemetry (~4 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.observability $(BENCH_ARGS)

.PHONY: bench-soak
bench-soak: $(BENCH_STAMP) ## 1,000 jobs/s for 30 min with cleanup on, own PostgreSQL with autovacuum: table size, latency (~32 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.soak $(BENCH_ARGS)

.PHONY: bench-scale
bench-scale: $(BENCH_STAMP) ## Drains of 200k jobs by 1, 2, 4, 8 and 16 worker processes: the curve, the claim's cost (~15 min; BENCH_ARGS="--help")
	$(BENCH_VENV)/bin/python -m benchmarks.scale $(BENCH_ARGS)

.PHONY: screenshots
screenshots: $(STAMP) ## Retake the dashboard's screenshots in docs/dashboard/ (Debian's chromium, headless)
	$(PY) -m tests.browser.screenshots

.PHONY: docs
docs: $(STAMP) ## Build the documentation site into site/ (strict: any warning fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

.PHONY: docs-serve
docs-serve: $(STAMP) ## Serve the documentation site with live reload on 127.0.0.1:8000
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

.PHONY: docs-screenshots
docs-screenshots: $(STAMP) ## Retake the site's screenshots in docs/screenshots/ (Debian's chromium, headless)
	$(PY) -m tests.browser.site_screenshots

.PHONY: check-dist
check-dist: $(STAMP) ## Build sdist and wheel, twine check them, install the wheel with each extra in a clean venv and run a job (~2 min)
	$(PY) tools/check_dist.py $(DIST_ARGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info site dist build
