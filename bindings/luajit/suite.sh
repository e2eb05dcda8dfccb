#!/usr/bin/env bash
# The LuaJIT binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory). Needs luajit.
set -euo pipefail
command -v luajit >/dev/null || { echo "luajit not found (apt-get install luajit)" >&2; exit 1; }
luajit tests/test_dlock.lua
