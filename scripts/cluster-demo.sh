#!/usr/bin/env bash
# spark-submit of the built cdcflow wheel runs the demo on a local cluster (a master and two
# workers, each executor its own JVM) and checks every replica against the oracle.
# See docs/deploy.md. `make cluster-demo` builds the wheel into build/cluster-demo/dist and runs
# this script: scripts/cluster-demo.sh [PYTHON]   (PYTHON creates the venvs; default python3.11)
#
# The driver's venv installs the wheel with the spark extra at the versions CI tests
# (constraints.txt, PySpark among them). The executors' venv has only what decoding imports in
# the Python workers, at the driver's versions: cdcflow itself reaches the executors with
# --py-files (as a .zip). The submission itself is scripts/cluster-submit.sh, which
# tests/test_cluster.py runs too.
set -euo pipefail
PYTHON=${1:-python3.11}
OUT=build/cluster-demo
WHEEL=$(ls "$OUT"/dist/cdcflow-*.whl)
PYSPARK=$(sed -n 's/^pyspark==//p' constraints.txt)
mkdir -p "$OUT"

[ -x "$OUT/driver/bin/python" ] || "$PYTHON" -m venv "$OUT/driver"
"$OUT/driver/bin/pip" install --quiet -c constraints.txt "$WHEEL[spark]"
"$OUT/driver/bin/pip" install --quiet --force-reinstall --no-deps "$WHEEL"
INSTALLED=$("$OUT/driver/bin/python" -c 'import pyspark; print(pyspark.__version__)')
if [ "$INSTALLED" != "$PYSPARK" ]; then
    echo "error: the driver's venv has PySpark $INSTALLED, not $PYSPARK (constraints.txt)" >&2
    exit 1
fi

[ -x "$OUT/executors/bin/python" ] || "$PYTHON" -m venv "$OUT/executors"
"$OUT/driver/bin/pip" freeze | grep -iE '^(pyarrow|numpy|orjson|fastavro|protobuf)==' \
    > "$OUT/executors-requirements.txt"
"$OUT/executors/bin/pip" install --quiet -r "$OUT/executors-requirements.txt"
cp "$WHEEL" "$OUT/cdcflow.zip"  # a wheel is a zip

# the jars of the demo's pipelines: landing zones on the embedded catalog (no Kafka)
printf '%s\n' 'sources: [{name: demo, path: demo-data}]' > "$OUT/demo-jars.yaml"
time scripts/cluster-submit.sh "$OUT" "$OUT/driver" "$OUT/executors/bin/python" \
    "$OUT/cdcflow.zip" "$OUT/demo-jars.yaml" -- demo --dir demo-data
echo "executors the local cluster's workers started (one folder each, in spark-home/work):"
ls -d "$OUT"/spark-home/work/app-*/*
