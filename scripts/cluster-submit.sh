#!/usr/bin/env bash
# spark-submit of cdcflow onto a local cluster (a master and two workers, each executor its own
# JVM), as docs/deploy.md describes it: what `make cluster-demo` runs once it has installed
# (scripts/cluster-demo.sh), and what tests/test_cluster.py runs in the test environment.
#
#   scripts/cluster-submit.sh WORKDIR DRIVER EXECUTORS_PYTHON CDCFLOW_ZIP CONFIG \
#       [SPARK_SUBMIT_OPTION...] -- CDCFLOW_ARGUMENT...
#
# DRIVER: the driver's venv (cdcflow with PySpark). EXECUTORS_PYTHON: the executors' Python, with
# the libraries decoding imports; cdcflow itself reaches the executors as CDCFLOW_ZIP with
# --py-files (Spark puts .zip, .egg and .py files on the workers' path, not .whl). CONFIG: the
# pipeline configuration whose jars are loaded (`cdcflow jars CONFIG`: the Iceberg runtime, the
# catalog's driver, Spark's Kafka connector only when Kafka is used), from cdcflow's jar cache
# (resolved into it first when missing). The command runs in WORKDIR, where the Spark home is.
set -euo pipefail
if [ $# -lt 6 ]; then sed -n '2,15p' "$0" >&2; exit 2; fi
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
WORKDIR=$(absolute "$1") DRIVER=$(absolute "$2") EXECUTORS=$(absolute "$3")
ZIP=$(absolute "$4") CONFIG=$(absolute "$5")
shift 5
OPTIONS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do OPTIONS+=("$1"); shift; done
[ $# -gt 0 ] && shift

JARS=$("$DRIVER/bin/cdcflow" jars "$CONFIG" --fetch --print jars)
SUBMIT=$("$DRIVER/bin/python" -c 'import cdcflow.submit as s; print(s.__file__)')

# local-cluster workers keep each application's folder in $SPARK_HOME/work: a Spark home of
# links to the installed PySpark's keeps it in WORKDIR, out of the venv.
PYSPARK=$("$DRIVER/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
mkdir -p "$WORKDIR"
cd "$WORKDIR"
rm -rf spark-home && mkdir spark-home
for d in bin jars python; do ln -s "$PYSPARK/$d" "spark-home/$d"; done

set -x
SPARK_HOME=$PWD/spark-home "$DRIVER/bin/spark-submit" \
    --master 'local-cluster[2,1,1024]' \
    --conf spark.pyspark.driver.python="$DRIVER/bin/python" \
    --conf spark.pyspark.python="$EXECUTORS" \
    --conf spark.executor.memory=512m \
    --conf spark.log.level=WARN \
    "${OPTIONS[@]}" \
    --jars "$JARS" \
    --py-files "$ZIP" \
    "$SUBMIT" "$@"
