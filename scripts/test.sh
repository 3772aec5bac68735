#!/usr/bin/env bash
# Runs Sluice's whole test suite (unit, integration with a real ZooKeeper, system tests with
# broker processes, interop with kcat / confluent-kafka / kafka-python, PySpark local[2] against
# broker processes), installing what is missing first. Extra arguments go to pytest, e.g.
# scripts/test.sh tests/unit -x
set -Eeuo pipefail
trap 'echo "test: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --extras test,spark
.venv/bin/ruff check .
# The import contracts (.importlinter): which packages may import which.
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -p no:cacheprovider "${@:-tests}"
