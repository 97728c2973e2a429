# cdcflow — every target sets up what it needs in .venv first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast fuzz bench lint proto check-install constraints cluster-demo clean

# pyproject.toml declares ranges; constraints.txt pins the exact versions installed here and in CI.
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	@command -v java >/dev/null || { echo "error: java not found: install a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[spark,dev]'
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cdcflow demo

test: $(STAMP)
	$(PY) -m pytest -q

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

# Regenerates src/cdcflow/proto/savegress_pb2.py from the .proto with the pinned grpcio-tools.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Isrc --python_out=src --pyi_out=src src/cdcflow/proto/savegress.proto

# Installs cdcflow (with the spark extra) into a throwaway venv that already has another PySpark 3.5
# patch release and another pyarrow than constraints.txt, as a user's stack would, and fails if pip
# replaces either. Downloads PySpark once (about 320 MB, then from pip's cache); not part of `test`.
CHECK_PYSPARK ?= 3.5.1
CHECK_PYARROW ?= 18.1.0
check-install:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) tools/check_install.py --python $(PYTHON) --pyspark $(CHECK_PYSPARK) --pyarrow $(CHECK_PYARROW) .

# Resolves pyproject.toml's ranges afresh in a throwaway venv (the newest versions inside them) and
# rewrites constraints.txt with what was installed; review the diff, then run `make test`.
constraints:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) tools/constraints.py --python $(PYTHON) .

# spark-submit of the built wheel runs the demo on a local cluster of two executor JVMs
# (docs/deploy.md); a few minutes, and two venvs in build/cluster-demo the first time.

cluster-demo: $(STAMP)
	rm -rf build/cluster-demo/dist
	$(PY) -m pip wheel --quiet --no-deps . -w build/cluster-demo/dist
	scripts/cluster-demo.sh $(PYTHON)

clean:
	rm -rf $(VENV) warehouse checkpoints .pytest_cache .mypy_cache .ruff_cache
