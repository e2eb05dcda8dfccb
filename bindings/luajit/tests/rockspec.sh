#!/usr/bin/env bash
# The rockspec installs the module as a user would: `luarocks lint`, `luarocks make` into a
# scratch tree, then LuaJIT loads dlock from that tree alone and opens a client. Its version
# must be the module's. Run by ../suite.sh from the binding's directory, with $LUAJIT set.
# Needs luarocks. Ends with "luajit-rockspec: N passed, N failed".
set -euo pipefail
: "${DLOCK_TEST_WORK:?run it through bindings/test.sh luajit}" "${REDIS_URL:?}"
luajit=${LUAJIT:-luajit}
command -v luarocks >/dev/null || { echo "luarocks not found (apt-get install luarocks)" >&2; exit 1; }
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok    $*"; }
fail() { failed=$((failed + 1)); echo "FAIL  $*"; }

rockspecs=(dlock-*.rockspec)
if ((${#rockspecs[@]} != 1)); then
  fail "expected one dlock-*.rockspec here, found: ${rockspecs[*]}"
else
  spec=${rockspecs[0]}
  tree=$DLOCK_TEST_WORK/rocks
  if ! out=$(luarocks lint "$spec" 2>&1); then
    fail "luarocks lint $spec: $out"
  elif ! luarocks --tree "$tree" make "$spec" >"$DLOCK_TEST_WORK/rocks.log" 2>&1; then
    fail "luarocks make $spec: $(tail -5 "$DLOCK_TEST_WORK/rocks.log")"
  else
    version=$(sed -n 's/^version = "\(.*\)-[0-9]*"$/\1/p' "$spec")
    # From the installed tree only: not from this directory.
    if out=$(cd "$DLOCK_TEST_WORK" && LUA_PATH="$tree/share/lua/5.1/?.lua" "$luajit" -e "
        local dlock = require('dlock')
        assert(package.searchpath('dlock', package.path):find('$tree', 1, true), 'not from the tree')
        assert(dlock._VERSION == '$version', 'the rockspec says $version, dlock.lua ' .. dlock._VERSION)
        local c = assert(dlock.open(os.getenv('REDIS_URL')))
        assert(c:run('rockspec-check', nil, function() end))
        c:close()
        io.write(dlock._VERSION)" 2>&1); then
      ok "$spec: lint, luarocks make into a scratch tree, require('dlock') from it ($out)"
    else
      fail "dlock from the luarocks tree: $out"
    fi
  fi
fi
echo "luajit-rockspec: $passed passed, $failed failed"
((failed == 0))
