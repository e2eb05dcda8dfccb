#!/usr/bin/env bash
# Tests the LuaJIT binding against a throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/luajit/test.sh
#
# DLOCK_LIBRARY defaults to <repo>/build/libdlock.so when that exists; a relative path is taken
# from the current directory. Needs luajit, redis-server and redis-cli.
set -euo pipefail
# Absolute before anything changes directory: a path relative to the caller's cwd. (A bare name
# that is no file here, e.g. libdlock.so.0, is left for the loader's search.)
if [[ -n ${DLOCK_LIBRARY:-} && $DLOCK_LIBRARY != /* ]]; then
  if [[ -e $DLOCK_LIBRARY ]]; then
    DLOCK_LIBRARY=$(CDPATH= cd -- "$(dirname -- "$DLOCK_LIBRARY")" && pwd)/$(basename -- "$DLOCK_LIBRARY")
  elif [[ $DLOCK_LIBRARY == */* ]]; then
    echo "DLOCK_LIBRARY=$DLOCK_LIBRARY: no such file (relative to $PWD)" >&2
    exit 1
  fi
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/scripts/lib.sh"

if [[ -z ${DLOCK_LIBRARY:-} && -e $repo/build/libdlock.so ]]; then
  DLOCK_LIBRARY=$repo/build/libdlock.so
fi
export DLOCK_LIBRARY
command -v luajit >/dev/null || { echo "luajit not found (apt-get install luajit)" >&2; exit 1; }

work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
export REDIS_PORT REDIS_URL
luajit "$here/tests/test_dlock.lua"
