#!/usr/bin/env bash
# Requests/s of /ping on one nginx worker while 50 concurrent requests contend for one lock,
# with the blocking calls (a client opened with blocking = true: the binding before issue 32)
# and with the yielding ones (the default under nginx). A measurement, not a test.
#
#   DLOCK_LIBRARY=build/libdlock.so bindings/luajit/tests/nginx/bench.sh [SECONDS] [HOLD_MS]
#
# Each contender (ab -c 50, from apache2-utils) acquires lock "bench" (wait_ms 2000), holds it
# HOLD_MS (default 10) with ngx.sleep, releases. Meanwhile ab -c 1 asks /ping for SECONDS
# (default 5) less one. Starts its own redis-server unless REDIS_URL and REDIS_PORT are set.
# MODES="none block yield" (the default) picks the runs; KEEP=1 keeps the files (ab output,
# nginx logs).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
source "$here/lib.sh"
seconds=${1:-5}
hold_ms=${2:-10}
command -v ab >/dev/null || { echo "ab not found (apt-get install apache2-utils)" >&2; exit 1; }
use_dlock_library
work=$(mktemp -d)
[[ -z ${KEEP:-} ]] || echo "bench: files in $work"
trap 'nginx_stop; stop_redis; [[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
if [[ -z ${REDIS_URL:-} || -z ${REDIS_PORT:-} ]]; then start_redis "$work"; fi

# ab's figure for a label ("Requests per second", "Complete requests", ...) from file $1.
abv() { sed -n "s/^$2: *\([0-9.]*\).*/\1/p" "$1" | head -1; }

printf '%-8s %12s %14s %14s %12s %12s %14s\n' mode "ping req/s" "ping mean ms" "ping max ms" \
  "lock req/s" "lock done" "lock failed"
# none: /ping alone, for scale. A /ping that gets no answer within the window counts as none
# answered (ab -s).
for mode in ${MODES:-none block yield}; do
  nginx_start "$work/$mode"
  name="bench-$mode-$$"
  contend=""
  if [[ $mode != none ]]; then
    ab -q -s "$seconds" -t "$seconds" -n 10000000 -c 50 \
      "$NGINX_URL/contend?mode=$mode&name=$name&hold_ms=$hold_ms&wait_ms=2000" >"$work/$mode.contend" 2>&1 &
    contend=$!
    # The contention under way: the lock held and others in its line.
    for _ in $(seq 100); do
      [[ $(redis-cli -p "$REDIS_PORT" ZCARD "dlock:{$name}:line") -ge 1 ]] && break
      sleep 0.02
    done
  fi
  ab -q -s "$((seconds - 1))" -t "$((seconds - 1))" -n 10000000 -c 1 "$NGINX_URL/ping" >"$work/$mode.ping" 2>&1 || true
  [[ -z $contend ]] || wait "$contend" || true
  nginx_stop
  rps=$(abv "$work/$mode.ping" "Requests per second")
  if [[ -z $rps ]]; then
    ping=("0" "-" "> $(((seconds - 1) * 1000))")  # ab gave up: no /ping answered in the window
  else
    ping=("$rps" "$(sed -n 's/^Time per request: *\([0-9.]*\) .*(mean)$/\1/p' "$work/$mode.ping" | head -1)"
      "$(sed -n 's/^ *100% *\([0-9]*\).*/\1/p' "$work/$mode.ping" | head -1)")
  fi
  if [[ $mode == none ]]; then
    lock=("-" "-" "-")
  else
    failed=$(abv "$work/$mode.contend" "Non-2xx responses")
    lock=("$(abv "$work/$mode.contend" "Requests per second")"
      "$(abv "$work/$mode.contend" "Complete requests")" "${failed:-0}")
  fi
  printf '%-8s %12s %14s %14s %12s %12s %14s\n' "$mode" "${ping[@]}" "${lock[@]}"
done
