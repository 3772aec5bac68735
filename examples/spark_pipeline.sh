#!/usr/bin/env bash
# Runs the example Spark pipeline (examples/spark_pipeline.py) against the quickstart cluster:
# installs the spark extra if missing, starts the cluster with scripts/quickstart.sh if no broker
# answers on 127.0.0.1:9092, checks Java, and runs the job with Spark's Python workers on the
# project's interpreter. Extra arguments go to spark_pipeline.py (--events N, --users N, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --extras spark
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ "${java_major:-0}" -lt 17 ]; then
    echo "PySpark 4 needs Java 17 or newer (found: ${java_major:-none}); install openjdk-17-jre-headless" >&2
    exit 1
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; then
    echo "no broker on 127.0.0.1:9092: starting the quickstart cluster"
    scripts/quickstart.sh
fi
# Spark starts Python workers with PYSPARK_PYTHON; they must import sluice and pyarrow.
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python examples/spark_pipeline.py "$@"
