# Two entry points that work from a fresh clone: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test test-integration install clean services-stop java-check bench chaos test-deploy

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

test: $(STAMP)
	@$(PY) -m audit.analytics.java || echo "WARNING: Spark tests will skip (or fail with HORAE_REQUIRE_SPARK=1)"
	$(PY) -m pytest -q -p no:cacheprovider

# The integration and end-to-end tests alone (used by .ci/run against the system servers; the
# Spark cluster test uses neither server, and the nightly one only drives the report that
# test_report.py checks against PostgreSQL: `make test` ran both already, CI keeps under 20 min).
test-integration: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/e2e --ignore=tests/e2e/test_spark_cluster.py \
	  --ignore=tests/e2e/test_nightly.py

# The full chaos run (tests/chaos, README "Guarantees"); `make test` runs a 60-second version.
# CHAOS_SEED (printed by every run: replay it), CHAOS_SECONDS (180), CHAOS_JOBS (10000),
# CHAOS_APPENDFSYNC (everysec; always = no loss tolerated). Starts its own servers.
chaos: $(STAMP)
	$(PY) -m tests.chaos

# The deployment material (README: Deploying; not part of `make test`): builds the Dockerfile
# with podman on a base made from Debian packages (mmdebstrap; no registry needed) and runs the
# image's worker and console against a redis-server of its own (deploy/image_check.py).
test-deploy: $(STAMP)
	$(PY) deploy/image_check.py

# The test suite's embedded servers live in .horae/ (tests/conftest.py); the demo's and
# the CLI's in the data directory horae finds (README: Configuration).
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
