#!/usr/bin/env bash
# The set-up commands of the README:
#   bash dev.sh demo    set up (venv + install) and run the demo query on the embedded defaults
#   bash dev.sh test    set up (venv + install), start/install what the tests need, run the test suite
#   bash dev.sh ui      set up, prepare the Dagster home .dagster (SQLite) and start `dagster dev`
#                       on the example queries (UI on http://127.0.0.1:3000); INCREMENTS_CELERY=1 bash dev.sh ui
#                       launches batch runs on a warm Celery worker it starts (orchestration/celery.py)
#   bash dev.sh launch <job>   launch a job of the workspace on the .dagster instance `ui` runs
#                       (e.g. bash dev.sh launch clicks_bronze_batch: the next batch, or the redo
#                       that resumes a halted query); no DAGSTER_HOME needed
#   bash dev.sh history <query>  the query's batch history (increments history)
# Extra arguments after `test` go to pytest (e.g. bash dev.sh test -m faults); after `ui`, to
# `dagster dev` (e.g. bash dev.sh ui -p 3001).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# requirements.lock: the versions the suite passed with (.ci/lock.py), as constraints; the install
# also compiles increments/native (setup.py): a changed C source reinstalls as a changed pyproject does
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ] || [ requirements.lock -nt .venv/.installed ] \
    || [ setup.py -nt .venv/.installed ] || [ -n "$(find increments/native -name '*.c' -newer .venv/.installed)" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c requirements.lock -e '.[dev]'
  touch .venv/.installed
fi

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

# What the tests need beyond the venv: PostgreSQL on 127.0.0.1:5432 (started if installed and down)
# and Chromium (the Dagster UI screenshot test; installed with apt-get when missing).
test_prerequisites() {
  if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
      echo "[dev.sh] PostgreSQL is not running; starting it"
      as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
      for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
    fi
  fi
  pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null \
    || echo "[dev.sh] WARNING: no PostgreSQL on 127.0.0.1:5432; the tests that need it will fail" >&2
  if ! command -v chromium >/dev/null 2>&1; then
    echo "[dev.sh] installing Debian's chromium for the Dagster UI screenshot test"
    (as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "[dev.sh] WARNING: chromium could not be installed (needs root or sudo and apt-get); the screenshot test will fail" >&2
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo) exec .venv/bin/python examples/demo.py "$@" ;;
  test) test_prerequisites; exec .venv/bin/python -m pytest -q "$@" ;;
  ui)
    .venv/bin/python -m orchestration.home .dagster --sqlite ${INCREMENTS_CELERY:+--celery} >/dev/null
    export DAGSTER_HOME="$PWD/.dagster"
    echo "[dev.sh] DAGSTER_HOME=$DAGSTER_HOME (SQLite); demo data: python examples/queries.py 6"
    if [ -n "${INCREMENTS_CELERY:-}" ]; then
      echo "[dev.sh] batch runs on a warm Celery worker, executor=\"celery\" steps on another (logs .dagster/celery-*.log)"
      .venv/bin/python -m orchestration.celery worker -Q increments-runs -n runs@%h > .dagster/celery-runs.log 2>&1 &
      runs_worker=$!
      .venv/bin/python -m orchestration.celery worker -Q dagster,increments-p0,increments-p1 -n steps@%h \
        > .dagster/celery-steps.log 2>&1 &
      trap "kill $runs_worker $! 2>/dev/null" EXIT
    fi
    if [ -n "${INCREMENTS_CELERY:-}" ]; then .venv/bin/dagster dev -w workspace.yaml "$@"; exit $?; fi
    exec .venv/bin/dagster dev -w workspace.yaml "$@" ;;
  launch)
    [ $# -ge 1 ] || { echo "usage: bash dev.sh launch <job> [dagster job launch args], e.g. clicks_bronze_batch" >&2; exit 2; }
    job=$1; shift
    [ -f .dagster/dagster.yaml ] || .venv/bin/python -m orchestration.home .dagster --sqlite >/dev/null
    export DAGSTER_HOME="$PWD/.dagster"
    exec .venv/bin/dagster job launch -w workspace.yaml -j "$job" "$@" ;;
  history) exec .venv/bin/increments history "$@" ;;
  *) echo "usage: bash dev.sh demo | test [pytest args] | ui [dagster dev args] | launch <job> | history <query>" >&2
     exit 2 ;;
esac
