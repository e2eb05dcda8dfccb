#!/usr/bin/env bash
# Tests the LuaJIT binding against a throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/luajit/test.sh
#
# DLOCK_LIBRARY defaults to <repo>/build/libdlock.so when that exists; a relative path is taken
# from the current directory. Needs luajit, redis-server and redis-cli.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/scripts/lib.sh"

use_dlock_library
command -v luajit >/dev/null || { echo "luajit not found (apt-get install luajit)" >&2; exit 1; }

work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
export REDIS_PORT REDIS_URL
luajit "$here/tests/test_dlock.lua"
