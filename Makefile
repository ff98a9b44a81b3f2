# Two entry points for a newcomer: `make test` and `make demo`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo clean

venv: $(STAMP)

$(STAMP): requirements-dev.txt packages/*/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation \
		-e packages/msprobe-common -e packages/msprobe-pytorch -e packages/msprobe-mindspore
	touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check packages tests tools examples

test: venv lint
	$(PY) -m pytest -q -p no:cacheprovider

demo: venv
	$(PY) examples/quickstart.py

clean:
	rm -rf $(VENV) demo_output
