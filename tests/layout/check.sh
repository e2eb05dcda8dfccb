#!/usr/bin/env bash
# The layers' boundaries (docs/layout.md), checked on the source tree:
#   - src/loop/ is the only code that includes libevent or calls it;
#   - src/core/ and capi/ include no backend (only the registry, from capi/, finds them).
# Prints each breach with its file and line, and exits 1 if there is one.
#
#   tests/layout/check.sh [REPO]        # --self-test: shows that a breach is caught
set -euo pipefail
repo=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

breaches() {
  local root=$1
  (
    cd "$root"
    grep -rn --include='*.cc' --include='*.h' -E '#include <event2/' src | grep -v '^src/loop/' |
      sed 's/$/   <- libevent outside src\/loop\//' || true
    grep -rn --include='*.cc' --include='*.h' -E '\b(event|bufferevent|evbuffer|evtimer|evutil)_[a-z_]+\(' src |
      grep -v '^src/loop/' | sed 's/$/   <- a libevent call outside src\/loop\//' || true
    # The core and the C API include only the core and the loop (and capi/, the registry): any
    # other folder of src/ is a backend or a backend's library, new ones included.
    grep -rn --include='*.cc' --include='*.h' -E '#include "[a-z_0-9]+/' src/core capi |
      grep -vE ':#include "(core|loop|dlock)/' |
      grep -v '^capi/[^:]*:[0-9]*:#include "backends/registry.h"' |
      sed 's/$/   <- the core or the C API names a backend/' || true
  )
}

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src/core" "$tmp/src/redis" "$tmp/capi"
  printf '#include <event2/event.h>\nvoid f() { event_add(0, 0); }\n' >"$tmp/src/redis/a.cc"
  printf '#include "memcached/keys.h"\n' >"$tmp/src/core/b.cc"  # a backend the check never heard of
  printf '#include "backends/registry.h"\n' >"$tmp/capi/c.cc"
  found=$(breaches "$tmp")
  want=3  # the include, the call, the core's backend; not capi's registry
  if [[ $(grep -c . <<<"$found") != "$want" || $found == *capi/c.cc* ]]; then
    printf 'layout self-test: want %s breaches (not capi/c.cc), got:\n%s\n' "$want" "$found"
    exit 1
  fi
  echo "layout self-test: ok (3 planted breaches found, the registry include allowed)"
  exit 0
fi

found=$(breaches "$repo")
if [[ -n $found ]]; then
  printf '%s\n' "$found"
  echo "layout: the layers' boundaries are crossed (docs/layout.md)"
  exit 1
fi
echo "layout: ok (libevent only in src/loop/; no backend named by src/core/ or capi/)"
