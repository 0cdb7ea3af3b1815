# One set of targets for developers and CI. `make test` and `make demo` set up everything they
# need on a fresh machine: the virtualenv, the package, the Kafka jars and a local broker.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA := compose/kafka-local/kafka.sh
STAMP := $(VENV)/.installed
# What the build compiles (the C reader, and the resume path's modules through mypyc): an edit to
# one of them rebuilds, so the suite always runs what ships.
COMPILED := src/turnlog/wire/_native.c $(shell $(PYTHON) src/turnlog/_compiled.py)

.PHONY: test demo inbox-demo docs docs-serve chromium lint unit integration bench soak broker-up broker-down broker-status clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml hatch_build.py src/turnlog/_compiled.py $(COMPILED)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

# The browser tests drive Debian's Chromium (Playwright's own browser download is not used).
chromium:
	@bash scripts/ensure-chromium.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests bench docs/snippets docs/_ext
	$(BIN)/ruff format --check src tests bench docs/snippets docs/_ext
	$(BIN)/mypy

# Starts the local broker unless TURNLOG_BOOTSTRAP_SERVERS names one, and stops it afterwards
# only if this run started it. The suite builds the docs site too, hence the docs extra.
test: $(STAMP) $(DOCS_STAMP) lint chromium
	@bash scripts/with-broker.sh $(BIN)/pytest tests

unit: $(STAMP) $(DOCS_STAMP)
	$(BIN)/pytest tests/unit

demo: $(STAMP)
	@bash scripts/with-broker.sh $(BIN)/turnlog demo

# Leaves a local inbox running (a few paused turns on the local broker) until Ctrl-C.
inbox-demo: $(STAMP)
	@bash scripts/with-broker.sh $(BIN)/turnlog inbox --demo

# The documentation site, warnings as errors (a broken link or a missing reference fails).
# Material prints a banner at every build: its end of life (May 2027; Zensical, by the same team,
# reads this mkdocs.yml). It is a notice, not a build warning; NO_MKDOCS_2_WARNING silences it.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	$(BIN)/mkdocs serve

bench: $(STAMP)
	@bash scripts/with-broker.sh $(BIN)/python -m bench

# The outage chaos test run SOAK_RUNS times, each on a broker of its own (about 90 s a run), judged
# by `turnlog audit`: a table of runs, violations found, healed and left, and the broker logs'
# dropped transaction markers (docs/guarantees.md). Not part of `make test`.
SOAK_RUNS ?= 40
soak: $(STAMP)
	@bash scripts/with-broker.sh $(BIN)/python bench/soak_outage.py --runs $(SOAK_RUNS) --txn-debug

broker-up:
	$(KAFKA) start

broker-down:
	$(KAFKA) stop

broker-status:
	$(KAFKA) status

clean:
	$(KAFKA) stop || true
	rm -rf .kafka/single .kafka/cluster3 .turnlog-state site
