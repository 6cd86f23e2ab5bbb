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
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date -u +%FT%TZ))"
echo "== per-batch overhead (embedded SQLite log)"; $PY bench/batch_overhead.py
if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "== per-batch overhead (PostgreSQL log)"
  $PY bench/batch_overhead.py --log-url postgresql+psycopg://postgres@127.0.0.1:5432/test
fi
echo "== near-empty stateful batches, whole runs, vs the durable floor (issue 33 item 1)"; $PY bench/small_batches.py
echo "== hourly clicks: 2,000,000 events in 20 files, and the same in Kafka"
$PY bench/hourly_clicks.py --kafka ${SPARK_PYTHON:+--spark-python "$SPARK_PYTHON"}
echo "== hourly clicks at 10,000,000 events (20 files, 500k a batch) vs DuckDB one-shot (keep >= 0.9x)"
$PY bench/hourly_clicks.py --events 10000000 --files 20
echo "== high-cardinality state: 2M rows into 1M keys in one batch, count and dedup (issue 33 item 3)"
$PY bench/high_cardinality.py ${SPARK_PYTHON:+--spark-python "$SPARK_PYTHON"}
echo "== stream-stream join vs DuckDB one-shot join"; $PY bench/join_throughput.py
echo "== Kafka read + parse vs raw consume"; $PY bench/kafka_read.py
echo "== adaptive batch sizing vs every fixed max_files_per_trigger"; $PY bench/adaptive_batches.py
echo "== state store commit latency"; $PY bench/state_commit.py --large "$LARGE"
echo "== object store: checkpoint requests per stateful batch"; $PY bench/object_store.py
echo "== Dagster: batch run vs empty one-op run"; $PY bench/dagster_overhead.py
