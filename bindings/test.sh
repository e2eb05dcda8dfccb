#!/usr/bin/env bash
# Runs the bindings' test suites against one throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/test.sh [python|node|luajit|all]...   # default: all
#
# DLOCK_LIBRARY (absolute, or relative to the current directory) defaults to
# <repo>/build/libdlock.so when that exists. Needs redis-server and redis-cli, plus what each
# suite names. Each binding's suite is bindings/<name>/suite.sh, run from the binding's
# directory with REDIS_PORT, REDIS_URL, DLOCK_LIBRARY (absolute), DLOCK_TEST_WORK (an empty
# scratch directory of its own) and DLOCK_TEST_CALLER_DIR (where this script was started:
# relative paths the caller gave are from there) in the environment; it passes when it exits 0. The suites run
# one after the other, all of them even when one fails. The last lines say how each one went
# (with the count lines each printed); the exit status is 1 if any failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../scripts/lib.sh"

known=(python node luajit)
bindings=()
for arg in "${@:-all}"; do
  case $arg in
  all) bindings+=("${known[@]}") ;;
  python | node | luajit) bindings+=("$arg") ;;
  *)
    echo "usage: bindings/test.sh [python|node|luajit|all]... (not '$arg')" >&2
    exit 64
    ;;
  esac
done

use_dlock_library  # absolute before the suites change directory
work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
export REDIS_PORT REDIS_URL
export DLOCK_TEST_CALLER_DIR=$PWD
echo "bindings: library ${DLOCK_LIBRARY:-<search>}, redis $REDIS_URL"

summary=()
rc=0
for b in "${bindings[@]}"; do
  log "$b binding"
  mkdir -p "$work/$b"
  result=passed
  if ! (cd "$here/$b" && DLOCK_TEST_WORK=$work/$b bash ./suite.sh) 2>&1 | tee "$work/$b.log"; then
    result=FAILED
    rc=1
  fi
  # the count lines the suite printed ("luajit: 11 passed, 0 failed", ...)
  counts=$(grep -E '^[a-z-]+: [0-9]+ passed' "$work/$b.log" | paste -sd ';' | sed 's/;/; /g' || true)
  summary+=("$(printf '%-7s %-7s %s' "$b" "$result" "${counts:+($counts)}")")
done

log "bindings: summary"
printf '%s\n' "${summary[@]}"
exit $rc
