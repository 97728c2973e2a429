# cdcflow — every target sets up what it needs in .venv first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The second Spark line, tested beside the default one (constraints-spark35.txt).
VENV35 := .venv-spark35
STAMP35 := $(VENV35)/.installed

.PHONY: setup setup-spark35 demo kafka-demo live-demo test test-spark35 test-fast fuzz bench lint proto check-install check-fresh constraints cluster-demo clean

# pyproject.toml declares ranges; constraints.txt pins the exact versions installed here and in CI.
# The jars (Iceberg's Spark runtime, JDBC drivers, Spark's Kafka connector) are resolved by their
# Maven coordinates into cdcflow's jar cache once; runs need no network afterwards.
define install
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet -c $(2) -e '.[spark,dev]'
	$(1)/bin/cdcflow jars --fetch
	@touch $(1)/.installed
endef

$(STAMP): pyproject.toml constraints.txt
	$(call install,$(VENV),constraints.txt)

$(STAMP35): pyproject.toml constraints-spark35.txt
	$(call install,$(VENV35),constraints-spark35.txt)

setup: $(STAMP)

setup-spark35: $(STAMP35)

demo: $(STAMP)
	$(VENV)/bin/cdcflow demo

# The demo through a Kafka broker started from its Maven artifacts (and stopped at the end).
kafka-demo: $(STAMP)
	$(VENV)/bin/cdcflow demo --kafka --dir ./demo-data/kafka

# PostgreSQL → Debezium's connector in Kafka Connect → Kafka → cdcflow run → Iceberg for a few
# minutes, with Kafka Connect and cdcflow killed and the broker restarted on the way; the
# database is the oracle (cdcflow.testing.live). LIVE_MINUTES sets the workload's length.
LIVE_MINUTES ?= 3
live-demo: $(STAMP)
	$(PY) -m cdcflow.testing.live --minutes $(LIVE_MINUTES)

test: $(STAMP)
	$(PY) -m pytest -q

# The suite's Spark tests on Spark 3.5 with Iceberg's 3.5 runtime (CI runs it beside
# `make test`); the tests that need no SparkSession, the same on both lines, run in `make test`.
test-spark35: $(STAMP35)
	$(VENV35)/bin/python -m pytest -q -m spark

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark"

# The long fuzz run: 10,000 mutated files per dialect and auto (the suite runs 1,000).
fuzz: $(STAMP)
	CDCFLOW_HYPOTHESIS=explore CDCFLOW_FUZZ_EXAMPLES=10000 CDCFLOW_FUZZ_MEMORY=1 $(PY) -m pytest -q -s tests/test_fuzz.py

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/ruff format --check src tests bench tools
	$(VENV)/bin/mypy -p cdcflow
	$(VENV)/bin/mypy bench tools

# Regenerates the Python code of src/cdcflow/proto/*.proto (messages, and the receiver's gRPC
# service) with the pinned grpcio-tools.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Isrc --python_out=src --pyi_out=src src/cdcflow/proto/savegress.proto
	$(PY) -m grpc_tools.protoc -Isrc --python_out=src --pyi_out=src --grpc_python_out=src \
		src/cdcflow/proto/receiver.proto

# Installs cdcflow (with the spark extra) into a throwaway venv that already has another PySpark 4.1
# patch release and another pyarrow than constraints.txt, as a user's stack would, and fails if pip
# replaces either. Downloads PySpark once (about 450 MB, then from pip's cache); not part of `test`.
# CHECK_PYSPARK=3.5.1 checks a Spark 3.5 stack the same way.
CHECK_PYSPARK ?= 4.1.0
CHECK_PYARROW ?= 18.1.0
check-install:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) tools/check_install.py --python $(PYTHON) --pyspark $(CHECK_PYSPARK) --pyarrow $(CHECK_PYARROW) .

# Installs cdcflow with the spark extra into an empty throwaway venv, as a new user would (the
# newest versions inside pyproject.toml's ranges, not the constraints), fetches every jar into an
# empty jar cache (Spark's Kafka connector may be missing there: only Kafka pipelines need it)
# and runs the demo; a few minutes, PySpark downloaded once. Not part of `test`.
check-fresh:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) tools/check_install.py --python $(PYTHON) --fresh .

# Resolves pyproject.toml's ranges afresh in a throwaway venv (the newest versions inside them) and
# rewrites constraints.txt and constraints-spark35.txt with what was installed; review the diff,
# then run `make test`. PySpark is held to releases whose own Kafka connector resolves from Maven.
CONSTRAINTS_PINS ?= --pin pyspark==4.1.1
CONSTRAINTS35_PINS ?= --pin pyspark==3.5.7
constraints:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) tools/constraints.py --python $(PYTHON) $(CONSTRAINTS_PINS) .
	$(PYTHON) tools/constraints.py --python $(PYTHON) --spark 3.5 $(CONSTRAINTS35_PINS) .

# spark-submit of the built wheel runs the demo on a local cluster of two executor JVMs
# (docs/deploy.md); a few minutes, and two venvs in build/cluster-demo the first time, the
# driver's at constraints.txt's versions. tests/test_cluster.py runs the same submission
# (scripts/cluster-submit.sh).

cluster-demo: $(STAMP)
	rm -rf build/cluster-demo/dist
	$(PY) -m pip wheel --quiet --no-deps . -w build/cluster-demo/dist
	scripts/cluster-demo.sh $(PYTHON)

clean:
	rm -rf $(VENV) $(VENV35) warehouse checkpoints .pytest_cache .mypy_cache .ruff_cache
