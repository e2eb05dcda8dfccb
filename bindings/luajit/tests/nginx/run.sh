#!/usr/bin/env bash
# The LuaJIT binding inside a real nginx (ngx_lua, one worker process): a request waiting for a
# lock must not block the worker. Run by ../../suite.sh (bindings/test.sh luajit sets
# REDIS_PORT, REDIS_URL, DLOCK_LIBRARY and DLOCK_TEST_WORK). Needs nginx, libnginx-mod-http-lua
# (with lua-resty-core), curl and redis-cli. Ends with "luajit-nginx: N passed, N failed".
#
# The main scenario, in each mode: /hold takes lock N and holds it 500 ms, then until /letgo;
# once Redis shows N held, /wait asks for it; once Redis shows the waiter in N's line, /ping
# is measured; then /letgo. "yield" (the binding's default under nginx; the waiter waits
# without limit, the default) must answer /ping within 50 ms and hand the lock over; "block" (a client opened with blocking = true, the
# binding's old behaviour) is the control: /ping waits for the blocked worker, and the waiter,
# blocking the worker its holder runs on, gives up after its wait_ms.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
source "$here/lib.sh"
: "${REDIS_PORT:?REDIS_PORT is not set (run bindings/test.sh luajit)}"
: "${DLOCK_TEST_WORK:?DLOCK_TEST_WORK is not set (run bindings/test.sh luajit)}"
command -v curl >/dev/null || { echo "curl not found (apt-get install curl)" >&2; exit 1; }
dir=$DLOCK_TEST_WORK/nginx
mkdir -p "$dir"
trap 'nginx_stop' EXIT
trap 'exit 130' INT TERM
nginx_start "$dir"
echo "nginx: $("$NGINX_BIN" -v 2>&1 | sed 's/^nginx version: //') at $NGINX_URL, one worker, error log $dir/error.log"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok    $*"; }
fail() { failed=$((failed + 1)); echo "FAIL  $*"; }
get() { curl -s --max-time 20 "$NGINX_URL$1"; }
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
# until CMD... succeeds, for at most SECONDS
wait_until() {
  local n=$(($1 * 50)) i
  shift
  for ((i = 0; i < n; i++)); do
    if "$@"; then return 0; fi
    sleep 0.02
  done
  return 1
}
key_is() { [[ $(rcli EXISTS "$1") == "$2" ]]; }
in_line() { [[ $(rcli ZCARD "$1:line") -ge 1 ]]; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
ms() { awk -v t="$1" 'BEGIN { printf "%.1f", t * 1000 }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# scenario MODE WAIT_MS PINGS: sets PINGS_MS (array), WAITED (yes/no), HOLD_OUT, WAIT_OUT.
# An empty WAIT_MS leaves the waiter's wait_ms out: the default, no limit (curl bounds it).
scenario() {
  local mode=$1 wait_ms=${2:+&wait_ms=$2} pings=$3 name="ping-$1-$$-$RANDOM" hold_pid wait_pid i t
  local key="dlock:{$name}"
  PINGS_MS=()
  WAITED=no
  curl -s --max-time 30 "$NGINX_URL/hold?mode=$mode&name=$name" >"$dir/hold.out" &
  hold_pid=$!
  if ! wait_until 5 key_is "$key" 1; then
    fail "$mode: the holder never held $name"
    wait "$hold_pid" || true
    return 1
  fi
  curl -s --max-time 30 "$NGINX_URL/wait?mode=$mode&name=$name$wait_ms" >"$dir/wait.out" &
  wait_pid=$!
  if ! wait_until 5 in_line "$key"; then
    fail "$mode: the waiter never queued for $name"
  fi
  for ((i = 0; i < pings; i++)); do
    t=$(curl -s -o /dev/null -w '%{time_total}' --max-time 30 "$NGINX_URL/ping")
    PINGS_MS+=("$(ms "$t")")
  done
  if kill -0 "$wait_pid" 2>/dev/null; then WAITED=yes; fi
  get "/letgo?name=$name" >/dev/null
  wait "$hold_pid" || true
  wait "$wait_pid" || true
  HOLD_OUT=$(cat "$dir/hold.out")
  WAIT_OUT=$(cat "$dir/wait.out")
}

# ----- 1. yielding: /ping answers while a request waits for the lock -----------------------
scenario yield "" 3
echo "  yield: holder: $HOLD_OUT"
echo "  yield: waiter: $WAIT_OUT"
sorted=$(printf '%s\n' "${PINGS_MS[@]}" | sort -g)
median=$(sed -n 2p <<<"$sorted")
if [[ $WAITED == yes ]] && lt "$median" 50; then
  ok "yield: /ping answered in ${PINGS_MS[*]} ms (median $median < 50) while the lock was held and a request waited for it"
else
  fail "yield: /ping took ${PINGS_MS[*]} ms (median $median; must be < 50), waiter still waiting: $WAITED"
fi
ht=$(field token "$HOLD_OUT")
wt=$(field token "$WAIT_OUT")
released=$(field released_at "$HOLD_OUT")
acquired=$(field acquired_at "$WAIT_OUT")
if [[ -n $ht && -n $wt && $(field holder "$WAIT_OUT") == releasing && $(field release "$HOLD_OUT") == ok ]] &&
  ((wt > ht)) && le "$released" "$acquired"; then
  ok "yield: the waiter got the lock once the holder released it ($(ms "$(awk -v a="$acquired" -v r="$released" 'BEGIN { print a - r }')") ms later), token $wt > $ht"
else
  fail "yield: handover: holder '$HOLD_OUT', waiter '$WAIT_OUT'"
fi

# ----- 2. the control: the blocking calls (open(url, { blocking = true })) ------------------
scenario block 1500 1
echo "  block: holder: $HOLD_OUT"
echo "  block: waiter: $WAIT_OUT"
if ! lt "${PINGS_MS[0]}" 50 && [[ $WAIT_OUT == "ERR NOT_ACQUIRED"* ]]; then
  ok "block (control): /ping took ${PINGS_MS[0]} ms (the 50 ms assertion fails), and the waiter, blocking its holder's worker, gave up after 1500 ms"
else
  fail "block (control): /ping took ${PINGS_MS[0]} ms, waiter '$WAIT_OUT' (expected > 50 ms and NOT_ACQUIRED)"
fi

# ----- 3. the rest of the nginx behaviour ---------------------------------------------------
refusal=$(get /init_refused)
if [[ $refusal == *init_worker_by_lua* && $refusal == *master* ]]; then
  ok "dlock.open in init_by_lua (the master) is refused: ${refusal#*: }"
else
  fail "dlock.open in init_by_lua: '$refusal'"
fi

name="contend-$$-$RANDOM"
pids=()
for i in $(seq 20); do
  curl -s --max-time 30 "$NGINX_URL/contend?name=$name&hold_ms=5" >"$dir/contend.$i" &
  pids+=($!)
done
wait "${pids[@]}" || true
tokens=$(cat "$dir"/contend.* | sed -n 's/^ok //p' | sort -u | wc -l)
overlaps=$(get "/overlaps?name=$name")
if [[ $tokens == 20 && $overlaps == 0 ]]; then
  ok "20 concurrent requests on one worker: each got the lock in turn (20 distinct tokens, no overlap)"
else
  fail "20 concurrent requests: $tokens distinct tokens, $overlaps overlaps: $(cat "$dir"/contend.* | sort | uniq -c | head -5)"
fi

name="lost-$$-$RANDOM"
get "/lost?name=$name&listener=1" >/dev/null
rcli DEL "dlock:{$name}" >/dev/null
lost_status() { [[ $(get "/lost_status?name=$name") != no ]]; }
if wait_until 5 lost_status; then
  status=$(get "/lost_status?name=$name")
  if [[ $status == *valid=false* && $status == *phase=timer* ]]; then
    ok "a lock deleted by hand: on_lost ran from the worker's timer ($status)"
  else
    fail "on_lost: $status"
  fi
else
  fail "on_lost never ran for $name"
fi

name="silent-$$-$RANDOM"
get "/lost?name=$name" >/dev/null
rcli DEL "dlock:{$name}" >/dev/null
logged() { grep -q "dlock: lock '$name' (fencing token [0-9]*) was lost.*(no on_lost callback)" "$dir/error.log"; }
if wait_until 5 logged; then
  ok "a lost lock without on_lost is written to the error log: $(grep -o "dlock: lock '$name'.*lost: [^(]*" "$dir/error.log" | head -1)"
else
  fail "no error-log line for the lost lock $name"
fi

name="run-$$-$RANDOM"
out=$(get "/run?name=$name")
if [[ $out == *"raised=true released=true holders=0"* && $out == *"results=true,x,true holders=0"* ]]; then
  ok "client:run yields inside nginx, releases on error and raises fn's error again"
else
  fail "client:run: $out"
fi

name="logphase-$$-$RANDOM"
get "/logphase?name=$name" >/dev/null
if wait_until 5 key_is "dlock:{$name}" 0; then
  status=$(get /logphase_status)
  if [[ $status == *release=true* && $status == *acquire=*"client:acquire cannot wait in nginx's 'log' phase"* &&
    $status == *set_value=*"lock:set_value cannot wait in nginx's 'log' phase"* ]]; then
    ok "log_by_lua: release starts without waiting; acquire and set_value are refused there"
  else
    fail "log phase: $status"
  fi
else
  fail "the release started in log_by_lua never happened"
fi

name="gc-$$-$RANDOM"
get "/gc?name=$name" >/dev/null
if wait_until 5 key_is "dlock:{$name}" 0; then
  ok "a lock left to the GC in a request is released (late, by its finalizer, without waiting)"
else
  fail "the forgotten lock $name was never released"
fi

name="killed-$$-$RANDOM"
out=$(get "/killed?name=$name")
if [[ $out == "killed=1 nil" ]] && wait_until 5 key_is "dlock:{$name}" 0; then
  ok "a light thread killed while waiting: the lock its acquire won afterwards was given back"
else
  fail "killed waiter: '$out', $name held: $(rcli EXISTS "dlock:{$name}")"
fi

name="elect-$$-$RANDOM"
out=$(get "/elect?name=$name")
if [[ $out == "ok=true proclaimed=first, proclaimed greater=true after_resign=true leader=second now=nil" ]]; then
  ok "client:campaign yields in a worker: the second candidate leads once the first resigned, with a greater term; set_value and leader there"
else
  fail "campaign in nginx: '$out'"
fi

for mode in yield block; do
  yielded=true
  [[ $mode == block ]] && yielded=false
  name="setvalue-$mode-$$-$RANDOM"
  out=$(get "/setvalue?name=$name&mode=$mode")
  if [[ $out == "yielded=$yielded set=true,nil value=v1 deposed=nil,NOT_HELD after=nil" ]]; then
    ok "lock:set_value in a worker ($mode client): yielded=$yielded; leader shows the new value; a deposed holder's is NOT_HELD and writes nothing"
  else
    fail "set_value in nginx ($mode client): '$out'"
  fi
done

for mode in yield block; do
  yielded=true
  [[ $mode == block ]] && yielded=false
  name="inspect-$mode-$$-$RANDOM"
  out=$(get "/inspect?name=$name&mode=$mode")
  if [[ $out == "yielded=$yielded holders=1 owner=me value=v0 same_term=true leader_value=v0 shared_leader=nil,EINVAL" ]]; then
    ok "client:inspect and client:leader in a worker ($mode client): yielded=$yielded; the holder, its value and term; no leader of a shared name"
  else
    fail "inspect in nginx ($mode client): '$out'"
  fi
done

for mode in yield block; do
  name="break-$mode-$$-$RANDOM"
  out=$(get "/break?name=$name&mode=$mode")
  if [[ $out == "holders=1 owner=holder-7 same_token=true closed=true,broken inspect=0,true,broken heard=true cause=true taken=false" ]]; then
    ok "client:break_lock in a worker ($mode client): the holder and its token broken, lost with cause broken and the reason; the name stays closed"
  else
    fail "break_lock in nginx ($mode client): '$out'"
  fi
  out=$(get "/break?name=$name-now&mode=$mode&now=1")
  if [[ $out == "holders=1 owner=holder-7 same_token=true closed=false, inspect=0,false, heard=true cause=true taken=true" ]]; then
    ok "client:break_lock(name, reason, true) in a worker ($mode client): free at once, taken with a greater token"
  else
    fail "break_lock now in nginx ($mode client): '$out'"
  fi
done

for mode in yield block; do
  name="ask-$mode-$$-$RANDOM"
  out=$(get "/ask?name=$name&mode=$mode")
  if [[ $out == "heard=true reason=deploy #42 phase=timer released=true free=true again=false" ]]; then
    ok "client:request_release in a worker ($mode client holds): the holder hears the reason in a timer and releases; the name is free"
  else
    fail "request_release in nginx ($mode client): '$out'"
  fi
done

for mode in yield block; do
  name="observe-$mode-$$-$RANDOM"
  out=$(get "/observe?name=$name&mode=$mode")
  if [[ $out == "first=nobody campaign=value:v1 proclaim=value:v2 resign=nobody extra=0 after_cancel=0 phase=timer" ]]; then
    ok "client:observe in a worker ($mode client): nobody, the campaign's term and value, the proclaim, the resignation, in order, fn yielding in a timer light thread; nothing after cancel"
  else
    fail "observe in nginx ($mode client): '$out'"
  fi
done

out=$(get /observe_init)
if [[ $out == "first=nobody campaign=leader-from-request resign=nobody" ]]; then
  ok "an observer started in init_worker_by_lua follows the election for the worker's life"
else
  fail "observer from init_worker: '$out'"
fi

for mode in yield block; do
  handed=true
  [[ $mode == block ]] && handed=false
  name="many-$mode-$$-$RANDOM"
  out=$(get "/many?name=$name&mode=$mode")
  if [[ $out == "none=NOT_ACQUIRED,true,true bounded=NOT_ACQUIRED,true handed=$handed tokens=3,true,true lost=NOT_HELD,true,true dup=EINVAL free=true" ]]; then
    ok "client:acquire_many in a worker ($mode client): all or none, bounded, handed=$handed (the holder's light thread runs only while a yielding waiter sleeps), own tokens, a group release naming the lost lock, a name given twice refused"
  else
    fail "acquire_many in nginx ($mode client): '$out'"
  fi
done

# A request waiting in acquire_many (one-try attempts, ngx.sleep between them) leaves the worker
# free: /ping answers meanwhile, and the waiter gets both names once the holder lets go.
name="pingmany-$$-$RANDOM"
curl -s --max-time 30 "$NGINX_URL/hold?mode=yield&name=$name" >"$dir/hold.out" &
hold_pid=$!
if wait_until 5 key_is "dlock:{$name}" 1; then
  curl -s --max-time 30 "$NGINX_URL/wait_many?mode=yield&name=$name" >"$dir/wait.out" &
  wait_pid=$!
  sleep 0.2
  PINGS_MS=()
  for i in 1 2 3; do
    t=$(curl -s -o /dev/null -w '%{time_total}' --max-time 30 "$NGINX_URL/ping")
    PINGS_MS+=("$(ms "$t")")
  done
  waited=no
  if kill -0 "$wait_pid" 2>/dev/null; then waited=yes; fi
  get "/letgo?name=$name" >/dev/null
  wait "$hold_pid" || true
  wait "$wait_pid" || true
  median=$(printf '%s\n' "${PINGS_MS[@]}" | sort -g | sed -n 2p)
  out=$(cat "$dir/wait.out")
  if [[ $waited == yes && $out == "locks=2 "*" holder=releasing release=ok" ]] && lt "$median" 50; then
    ok "acquire_many waits without blocking the worker: /ping answered in ${PINGS_MS[*]} ms (median $median < 50) while it waited, and it got both names once the holder let go"
  else
    fail "acquire_many's wait: /ping took ${PINGS_MS[*]} ms (median $median), waiter still waiting: $waited, waiter: '$out'"
  fi
else
  fail "the holder never held $name"
  wait "$hold_pid" || true
fi

if grep -E '\[(error|crit|alert|emerg)\]' "$dir/error.log" >"$dir/errors" 2>/dev/null; then
  fail "nginx's error log has errors: $(head -3 "$dir/errors")"
else
  ok "nginx's error log has no error lines"
fi

nginx_stop
echo "luajit-nginx: $passed passed, $failed failed"
((failed == 0))
