#!/usr/bin/env bash
# Runs the example Spark pipeline (examples/spark_pipeline.py) against a cluster: installs the
# spark extra if missing, checks Java, and runs the job with Spark's Python workers on the
# project's interpreter. Without --bootstrap-servers it uses the quickstart cluster on
# 127.0.0.1:9092-9094, starting it with scripts/quickstart.sh if no broker answers on 9092; with
# --bootstrap-servers it uses that cluster and starts nothing. Other arguments go to
# spark_pipeline.py (--events N, --users N, ...). Every failure exits non-zero with a message.
set -Eeuo pipefail
trap 'echo "spark_pipeline: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
fail() { echo "spark_pipeline: $*" >&2; exit 1; }

given=no
for arg in "$@"; do
    case "$arg" in --bootstrap-servers|--bootstrap-servers=*) given=yes ;; esac
done

scripts/bootstrap.sh --extras spark || fail "installing the spark extra failed"
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1 || true)
if [ "${java_major:-0}" -lt 17 ]; then
    fail "PySpark 4 needs Java 17 or newer (found: ${java_major:-none}); install openjdk-17-jre-headless"
fi
if [ $given = no ] && ! (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; then
    echo "no broker on 127.0.0.1:9092: starting the quickstart cluster"
    scripts/quickstart.sh || fail "the quickstart cluster did not start (logs in run/)"
fi
# Spark starts Python workers with PYSPARK_PYTHON; they must import sluice and pyarrow.
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python examples/spark_pipeline.py "$@"
