#!/usr/bin/env bash
# The two set-up commands of the README:
#   bash dev.sh demo    set up (venv + install) and run the demo query on the embedded defaults
#   bash dev.sh test    set up (venv + install) and run the test suite
# Extra arguments after `test` go to pytest (e.g. bash dev.sh test -m faults).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch .venv/.installed
fi
cmd=${1:-}
shift || true
case "$cmd" in
  demo) exec .venv/bin/python examples/demo.py "$@" ;;
  test) exec .venv/bin/python -m pytest -q "$@" ;;
  *) echo "usage: bash dev.sh demo | test [pytest args]" >&2; exit 2 ;;
esac
