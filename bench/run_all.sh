#!/usr/bin/env bash
# Every benchmark, one command:   bash bench/run_all.sh [--full]
# Each prints its figures as ratios against a reference measured in the same run.
# --full runs the state bench at 10M keys (tens of minutes) instead of 1M.
# The Spark reference runs when pyspark is importable (pip install -e '.[spark]', Java 17) or
# SPARK_PYTHON points at a Python that has it; otherwise it is skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "run bash dev.sh test (or demo) once first to create .venv" >&2; exit 1; }
PY=.venv/bin/python
LARGE=1000000
[ "${1:-}" = "--full" ] && LARGE=10000000
echo "== per-batch overhead (embedded SQLite log)"; $PY bench/batch_overhead.py
if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "== per-batch overhead (PostgreSQL log)"
  $PY bench/batch_overhead.py --log-url postgresql+psycopg://postgres@127.0.0.1:5432/test
fi
echo "== hourly clicks: 2,000,000 events in 20 files, and the same in Kafka"
$PY bench/hourly_clicks.py --kafka ${SPARK_PYTHON:+--spark-python "$SPARK_PYTHON"}
echo "== stream-stream join vs DuckDB one-shot join"; $PY bench/join_throughput.py
echo "== Kafka read + parse vs raw consume"; $PY bench/kafka_read.py
echo "== adaptive batch sizing vs every fixed max_files_per_trigger"; $PY bench/adaptive_batches.py
echo "== state store commit latency"; $PY bench/state_commit.py --large "$LARGE"
echo "== Dagster: batch run vs empty one-op run"; $PY bench/dagster_overhead.py
