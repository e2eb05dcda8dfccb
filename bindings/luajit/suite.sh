#!/usr/bin/env bash
# The LuaJIT binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory):
#   tests/test_dlock.lua   plain LuaJIT (the blocking calls)
#   tests/nginx/run.sh     inside a real nginx with ngx_lua (the yielding calls)
#   tests/rockspec.sh      the rockspec, through luarocks
# Needs a LuaJIT interpreter ($LUAJIT, else `luajit`: Debian's luajit2 package installs it
# as /usr/bin/luajit, and coexists with libnginx-mod-http-lua, which the luajit package
# does not), nginx, libnginx-mod-http-lua, curl and luarocks.
set -euo pipefail
luajit=${LUAJIT:-$(command -v luajit || true)}
[[ -n $luajit && -x $luajit ]] || { echo "luajit not found (apt-get install luajit2, or set LUAJIT)" >&2; exit 1; }
echo "luajit: $("$luajit" -v 2>&1 | head -1) ($luajit)"
rc=0
"$luajit" tests/test_dlock.lua || rc=1
LUAJIT=$luajit bash tests/nginx/run.sh || rc=1
LUAJIT=$luajit bash tests/rockspec.sh || rc=1
exit $rc
