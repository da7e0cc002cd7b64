# The two commands a new user needs are `make demo` and `make test`; each does its own set-up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= infra/embedded.yaml
PYTEST_ARGS ?=
TEST_WORKERS ?= 3

.PHONY: setup system-packages bytecode demo test test-kafka39 unit integration bench chaos soak up down status lint clean

NODE_STAMP := tests/compat/js/node_modules/.installed

KAFKA_STAMP := .state/kafka-dist/.fetched

setup: system-packages $(STAMP) $(NODE_STAMP) $(KAFKA_STAMP) bytecode

# The project's own bytecode, written even where PYTHONDONTWRITEBYTECODE is set (as on these machines):
# otherwise each process the demo and the suite start — CLI commands, workers, gateways, and Temporal's
# sandbox re-importing the workflows — compiles every module anew, a fifth of a CLI command's CPU.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 switchyard workers activities workflows tests >/dev/null

system-packages:
	@infra/install-system-packages.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[embedded,dev]'
	@touch $(STAMP)

# kafkajs for the client compatibility tests, at the version package-lock.json pins.
$(NODE_STAMP): tests/compat/js/package-lock.json
	cd tests/compat/js && npm ci --silent --no-audit --no-fund
	@touch $(NODE_STAMP)

# Apache Kafka's jars from Maven Central, once per version the stack's configuration names (offline after).
$(KAFKA_STAMP): $(STAMP) infra/embedded.yaml
	$(BIN)/switchyard --config $(CONFIG) stack fetch
	@touch $(KAFKA_STAMP)

demo: setup
	$(BIN)/switchyard --config $(CONFIG) demo

# Most tests wait (group joins, time-outs) more than they compute, so they run on $(TEST_WORKERS) workers,
# each with a stack of its own; the few that judge clients' pauses against a bound then run alone.
test: setup
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" $(PYTEST_ARGS)
	$(BIN)/pytest -m alone tests/integration $(PYTEST_ARGS)

# The exactly-once tests on Apache Kafka 3.9.2 clusters (the transaction protocol before version 2).
test-kafka39: setup
	SWITCHYARD_TEST_KAFKA_VERSION=3.9.2 $(BIN)/pytest tests/integration/test_transactions.py $(PYTEST_ARGS)
unit: setup
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

integration: setup
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

bench: setup
	$(BIN)/pytest tests/bench -s $(PYTEST_ARGS)

# Chaos trials: a saga under traffic, one process killed or frozen at a random moment of each
# (SWITCHYARD_CHAOS_TRIALS, 100 by default; SWITCHYARD_CHAOS_SEED replays a run).
chaos: setup
	$(BIN)/pytest tests/chaos -s $(PYTEST_ARGS)

# 20 minutes of traffic through the gateway at 5,000 records/s, a switch every minute, a worker, gateway,
# mirror and broker restart;
# `make bench` runs the same for 4 minutes. Figures and a plot land in .state/soak/.
SOAK_S ?= 1200
soak: setup
	SWITCHYARD_SOAK_S=$(SOAK_S) $(BIN)/pytest tests/bench/test_soak.py -s $(PYTEST_ARGS)

up: setup
	$(BIN)/switchyard --config $(CONFIG) stack up

down:
	@if [ -x $(BIN)/switchyard ]; then $(BIN)/switchyard --config $(CONFIG) stack down; fi

status: setup
	$(BIN)/switchyard --config $(CONFIG) stack status

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean: down
	rm -rf $(VENV) .state .pytest_cache .mypy_cache .ruff_cache
