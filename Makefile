# Two entry points that work from a fresh clone: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint test-integration install clean services-stop java-check bench chaos test-deploy test-pythons docs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# PySpark 4 needs Java 17+: say what to install (the demo's report needs it; tests
# of Spark skip without it unless HORAE_REQUIRE_SPARK=1, as CI sets).
java-check: $(STAMP)
	@$(PY) -m audit.analytics.java

demo: $(STAMP) java-check
	$(VENV)/bin/horae demo
	$(VENV)/bin/horae report --since today --until today --out reports/demo
	@echo
	@echo "Open the console on the demo data (then http://127.0.0.1:8080/):"
	@echo "  $(VENV)/bin/horae --namespace horae-demo console --reports reports/demo"

# ruff (lint, then the format check) and mypy strict over the product packages ([tool.ruff] and
# [tool.mypy] in pyproject.toml); `make test` runs it first, so CI does too. A few seconds with
# mypy's cache (.mypy_cache), about half a minute without.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml) into site/, offline: --strict fails on a broken link, a
# missing page or an unresolved API reference. `make test` builds it too (tests/docs/, which also
# runs every python and console example of the pages: tests/docs/docrunner.py says how).
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its end of life, printed by every build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The isolated tests on both cores (pytest-xdist, one file per worker at a time), then the few
# marked `serial` alone: timing bounds and ports that must stay free while nothing else runs.
test: $(STAMP) lint
	@$(PY) -m audit.analytics.java || echo "WARNING: Spark tests will skip (or fail with HORAE_REQUIRE_SPARK=1)"
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -p no:cacheprovider -m serial

# The integration and end-to-end tests alone (used by .ci/run against the system servers; the
# Spark cluster test uses neither server, and the nightly one only drives the report that
# test_report.py checks against PostgreSQL: `make test` ran both already, CI keeps under 20 min).
test-integration: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/e2e --ignore=tests/e2e/test_spark_cluster.py \
	  --ignore=tests/e2e/test_nightly.py

# The full chaos run (tests/chaos, docs/concepts/guarantees.md); `make test` runs a 60-second version.
# CHAOS_SEED (printed by every run: replay it), CHAOS_SECONDS (180), CHAOS_JOBS (10000),
# CHAOS_APPENDFSYNC (everysec; always = no loss tolerated). Starts its own servers.
chaos: $(STAMP)
	$(PY) -m tests.chaos

# The deployment material (docs/how-to/deploying.md; not part of `make test`): builds the Dockerfile
# with podman on a base made from Debian packages (mmdebstrap; no registry needed) and runs the
# image's worker and console against a redis-server of its own (deploy/image_check.py).
DEPLOY_TOOLS := podman buildah mmdebstrap runc uidmap slirp4netns fuse-overlayfs
test-deploy: $(STAMP)
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEPLOY_TOOLS); }
	$(PY) deploy/image_check.py

# The test suite's embedded servers live in .horae/ (tests/conftest.py); the demo's and
# the CLI's in the data directory horae finds (docs/how-to/configuring.md).
services-stop: $(STAMP)
	HORAE_DATA_DIR=$(CURDIR)/.horae $(VENV)/bin/horae services stop
	$(VENV)/bin/horae services stop

clean:
	-HORAE_DATA_DIR=$(CURDIR)/.horae $(VENV)/bin/horae services stop
	-$(VENV)/bin/horae services stop
	rm -rf $(VENV) .horae build *.egg-info

# Benchmark against bullmq, arq and saq (not part of `make test`; see bench/README.md).
# Each peer gets its own venv under bench/.venvs; BENCH_ARGS e.g. "--scale 0.1 --reps 1".
BENCH_VENVS := bench/.venvs
.PHONY: bench  # a directory is called bench too
bench: $(STAMP)
	@for s in bullmq arq saq tools; do \
	  if [ ! -x $(BENCH_VENVS)/$$s/bin/python ]; then $(PYTHON) -m venv $(BENCH_VENVS)/$$s; fi; \
	  if [ ! -f $(BENCH_VENVS)/$$s/.installed ] || [ bench/requirements-$$s.txt -nt $(BENCH_VENVS)/$$s/.installed ]; then \
	    $(BENCH_VENVS)/$$s/bin/pip install --quiet --upgrade -r bench/requirements-$$s.txt && touch $(BENCH_VENVS)/$$s/.installed || exit 1; \
	  fi; \
	done
	$(PY) bench/run.py $(BENCH_ARGS)
	$(PY) bench/cluster.py $(CLUSTER_BENCH_ARGS)  # issue 17: 1 vs 6 partitions on a Redis Cluster it starts
	$(PY) bench/tracing_cost.py --sampled --plain $(TRACING_BENCH_ARGS)  # issue 34: tracing stays cheap
	$(PY) bench/fanin.py $(FANIN_BENCH_ARGS)  # issue 32: a fan-in of 10,000 children against FlowProducer
	$(PY) bench/redis_instructions.py --per-call  # issue 34: redis-server instructions per job and per call (callgrind)
	$(PY) bench/postgres_instructions.py  # issue 34: PostgreSQL instructions per audited job (callgrind)
	$(PY) bench/relay_instructions.py  # issue 34: the audit relay's instructions per job (callgrind)

# Every Python the project claims (pyproject's "Programming Language :: Python :: 3.x"
# classifiers; PYTHONS="3.12 3.14" to choose): each in its own venv under .venvs/ with
# '.[dev]', then the unit suite with the Spark tests required (their Python workers must run
# that venv's interpreter). Interpreters: pythonX.Y on PATH, else pyenv's newest X.Y.*.
# An interpreter not found or a venv that does not install is reported, not tested; the
# target fails when a suite fails or nothing was tested.
PYTHONS ?= $(shell sed -n 's/.*"Programming Language :: Python :: \(3\.[0-9][0-9]*\)".*/\1/p' pyproject.toml)
VENVS   := .venvs
test-pythons:
	@summary=""; failed=0; tested=0; \
	for v in $(PYTHONS); do \
	  py=$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -1); \
	  if command -v python$$v >/dev/null 2>&1 && python$$v -c '' 2>/dev/null; then py=$$(command -v python$$v); fi; \
	  if [ -z "$$py" ]; then summary="$$summary\n  $$v: no interpreter found, not tested"; continue; fi; \
	  venv=$(VENVS)/py$$v; \
	  echo "== Python $$v ($$py) in $$venv"; \
	  if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
	    { [ -x $$venv/bin/python ] || $$py -m venv $$venv; } && $$venv/bin/python -m pip install --quiet --upgrade pip \
	      && $$venv/bin/python -m pip install --quiet -e '.[dev]' && touch $$venv/.installed \
	      || { summary="$$summary\n  $$v: '.[dev]' does not install, not tested"; failed=1; continue; }; \
	  fi; \
	  tested=$$((tested + 1)); \
	  if HORAE_REQUIRE_SPARK=1 $$venv/bin/python -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS); then \
	    summary="$$summary\n  $$v: passed ($$($$venv/bin/python -VV | head -1))"; \
	  else summary="$$summary\n  $$v: FAILED"; failed=1; fi; \
	done; \
	printf "test-pythons:$$summary\n"; \
	[ $$failed = 0 ] && [ $$tested -gt 0 ]
