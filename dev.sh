#!/usr/bin/env bash
# The two commands of the README quick start, for a fresh Debian machine with Python 3.11:
#   ./dev.sh demo [ARGS]   install everything into .venv, then run `lotus demo` (generated dataset)
#   ./dev.sh test [ARGS]   install if needed, then run the whole test suite (what CI runs)
# Other verbs: install, lint, bench.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

install() {
  if [ ! -x .venv/bin/python ]; then
    if ! "$PY" -m venv .venv; then
      rm -rf .venv
      echo "dev.sh: '$PY -m venv' failed; on Debian/Ubuntu: sudo apt-get install python3-venv" >&2
      exit 1
    fi
  fi
  local stamp=.venv/.lotus-installed
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "dev.sh: installing lotus and its dependencies into .venv (torch takes ~90 s)" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
    touch "$stamp"
  fi
}

verb=${1:-test}
[ $# -gt 0 ] && shift
case "$verb" in
  install) install ;;
  demo) install; exec .venv/bin/lotus demo "$@" ;;
  test) install; .venv/bin/ruff check src tests benchmarks examples scripts
        exec .venv/bin/python -m pytest -q -n "${LOTUS_TEST_PROCS:-2}" --dist worksteal "$@" ;;  # idle process takes queued tests
  lint) install; exec .venv/bin/ruff check src tests benchmarks examples scripts ;;
  bench) install; exec .venv/bin/python benchmarks/overhead.py "$@" ;;
  *) echo "usage: ./dev.sh demo|test|install|lint|bench [ARGS]" >&2; exit 2 ;;
esac
