#!/usr/bin/env bash
# spark-submit of the built cdcflow wheel runs the demo on a local cluster (a master and two
# workers, each executor its own JVM) and checks every replica against the oracle.
# See docs/deploy.md. `make cluster-demo` builds the wheel into build/cluster-demo/dist and runs
# this script: scripts/cluster-demo.sh [PYTHON]   (PYTHON creates the venvs; default python3.11)
#
# The driver's venv installs the wheel with the spark extra. The executors' venv has only what
# decoding imports in the Python workers, at the driver's versions: cdcflow itself reaches the
# executors with --py-files (as a .zip: Spark puts .zip, .egg and .py files on the workers' path,
# not .whl).
set -euo pipefail
PYTHON=${1:-python3.11}
OUT=build/cluster-demo
WHEEL=$(ls "$OUT"/dist/cdcflow-*.whl)
mkdir -p "$OUT"

[ -x "$OUT/driver/bin/python" ] || "$PYTHON" -m venv "$OUT/driver"
"$OUT/driver/bin/pip" install --quiet "$WHEEL[spark]"
"$OUT/driver/bin/pip" install --quiet --force-reinstall --no-deps "$WHEEL"

[ -x "$OUT/executors/bin/python" ] || "$PYTHON" -m venv "$OUT/executors"
"$OUT/driver/bin/pip" freeze | grep -iE '^(pyarrow|numpy|orjson|fastavro|protobuf)==' \
    > "$OUT/executors-requirements.txt"
"$OUT/executors/bin/pip" install --quiet -r "$OUT/executors-requirements.txt"
cp "$WHEEL" "$OUT/cdcflow.zip"  # a wheel is a zip

# local-cluster workers keep each application's folder in $SPARK_HOME/work: a Spark home of
# links to the installed PySpark's keeps it here, out of the venv.
PYSPARK=$("$OUT/driver/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
rm -rf "$OUT/spark-home" && mkdir "$OUT/spark-home"
for d in bin jars python; do ln -s "$PYSPARK/$d" "$OUT/spark-home/$d"; done

# the jars a session needs, by Maven coordinates, resolved once into cdcflow's jar cache
JARS=$("$OUT/driver/bin/cdcflow" jars --fetch --print jars)
SUBMIT=$("$OUT/driver/bin/python" -c 'import cdcflow.submit as s; print(s.__file__)')
cd "$OUT"
set -x
time SPARK_HOME=$PWD/spark-home driver/bin/spark-submit \
    --master 'local-cluster[2,1,1024]' \
    --conf spark.pyspark.driver.python="$PWD/driver/bin/python" \
    --conf spark.pyspark.python="$PWD/executors/bin/python" \
    --conf spark.executor.memory=512m \
    --conf spark.log.level=WARN \
    --jars "$JARS" \
    --py-files cdcflow.zip \
    "$SUBMIT" demo --dir demo-data
set +x
echo "executors the local cluster's workers started (one folder each, in spark-home/work):"
ls -d spark-home/work/app-*/*
