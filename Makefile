# Two entry points that work from a fresh clone: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test test-integration install clean services-stop

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/horae demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

# The integration and end-to-end tests alone (used by .ci/run against the system servers).
test-integration: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/e2e

services-stop: $(STAMP)
	$(VENV)/bin/horae services stop

clean:
	-$(VENV)/bin/horae services stop
	rm -rf $(VENV) .horae build *.egg-info
