# shellcheck shell=bash
# Shared helpers for scripts/demo and scripts/test: source it after `set -euo pipefail`.
#
#   free_port                   prints a free TCP port on 127.0.0.1
#   start_redis DIR             starts a throwaway redis-server (no persistence) with its files
#                               in DIR; sets REDIS_PID, REDIS_PORT, REDIS_URL
#   stop_redis                  stops it (SIGTERM, SIGKILL after 2 s); safe to call twice
#   start_dynalite DIR          starts a throwaway dynalite (in memory) logging to DIR; sets
#                               DYNALITE_PID, DYNALITE_ENDPOINT
#   stop_dynalite               stops it; safe to call twice
#   start_etcd DIR              starts a throwaway one-node etcd (data in DIR); sets ETCD_PID,
#                               ETCD_ENDPOINT (host:port of its client URL)
#   stop_etcd                   stops it; safe to call twice
#   abs_path PATH               PATH made absolute against the current directory
#   use_dlock_library           exports DLOCK_LIBRARY for the bindings' tests: the caller's
#                               value made absolute (a path is relative to the caller's cwd;
#                               a bare name with no such file here is left to the loader), or
#                               <repo>/build/libdlock.so when unset and built
#   configure DIR [ARGS...]     cmake -S <repo> -B DIR [-G Ninja for a new DIR] ARGS...

# shellcheck disable=SC2034 # REDIS_* are for the scripts that source this file
DLOCK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REDIS_PID=""
REDIS_PORT=""
REDIS_URL=""
DYNALITE_PID=""
DYNALITE_ENDPOINT=""
ETCD_PID=""
ETCD_ENDPOINT=""

log() { printf '\n==> %s\n' "$*" >&2; }

free_port() {
  if command -v python3 >/dev/null 2>&1 &&
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()' 2>/dev/null; then
    return 0
  fi
  # No python3: pick random high ports until one refuses connections.
  local port
  for _ in $(seq 200); do
    port=$(((RANDOM * 32768 + RANDOM) % 25000 + 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "free_port: no free port found" >&2
  return 1
}

# Waits up to 10 s, while process PID runs, for the shell test PROBE (a string) to succeed.
await_ready() {
  local pid=$1 probe=$2
  for _ in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || return 1
    if eval "$probe"; then return 0; fi
    sleep 0.05
  done
  return 1
}

start_redis() {
  local dir=$1 port attempt
  command -v redis-server >/dev/null || { echo "start_redis: redis-server not found" >&2; return 1; }
  command -v redis-cli >/dev/null || { echo "start_redis: redis-cli not found" >&2; return 1; }
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
      --daemonize no --logfile "$dir/redis.log" --unixsocket "$dir/redis.sock" \
      --unixsocketperm 700 </dev/null >"$dir/redis.stdout" 2>&1 &
    REDIS_PID=$!
    # Ours, not some other server that raced us to the port?
    if await_ready "$REDIS_PID" "[[ \$(redis-cli -p $port info server 2>/dev/null | tr -d '\\r' | sed -n 's/^process_id://p') == $REDIS_PID ]]"; then
      REDIS_PORT=$port
      REDIS_URL="redis://127.0.0.1:$port"
      return 0
    fi
    stop_redis
    echo "start_redis: attempt $attempt on port $port failed:" >&2
    tail -n 5 "$dir/redis.log" "$dir/redis.stdout" >&2 2>/dev/null || true
  done
  return 1
}

# SIGTERM, SIGKILL after 2 s, reap. An empty pid is fine.
stop_pid() {
  local pid=$1
  [[ -n $pid ]] || return 0
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

stop_redis() {
  local pid=$REDIS_PID
  REDIS_PID=""
  stop_pid "$pid"
}

start_dynalite() {
  local dir=$1 port attempt cli="$DLOCK_ROOT/tests/dynamodb/node_modules/dynalite/cli.js"
  [[ -f $cli ]] || { echo "start_dynalite: $cli missing (run scripts/setup)" >&2; return 1; }
  for attempt in 1 2 3; do
    port=$(free_port)
    node "$cli" --port "$port" --host 127.0.0.1 --createTableMs 0 --deleteTableMs 0 \
      --updateTableMs 0 </dev/null >"$dir/dynalite.log" 2>&1 &
    DYNALITE_PID=$!
    if await_ready "$DYNALITE_PID" "(exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null"; then
      DYNALITE_ENDPOINT="http://127.0.0.1:$port"
      return 0
    fi
    stop_dynalite
    echo "start_dynalite: attempt $attempt on port $port failed:" >&2
    tail -n 5 "$dir/dynalite.log" >&2 2>/dev/null || true
  done
  return 1
}

stop_dynalite() {
  local pid=$DYNALITE_PID
  DYNALITE_PID=""
  stop_pid "$pid"
}

start_etcd() {
  local dir=$1 client peer attempt
  command -v etcd >/dev/null || { echo "start_etcd: etcd missing (run scripts/setup)" >&2; return 1; }
  for attempt in 1 2 3; do
    client=$(free_port)
    peer=$(free_port)
    rm -rf "$dir/etcd.data"
    etcd --name e0 --data-dir "$dir/etcd.data" --listen-client-urls "http://127.0.0.1:$client" \
      --advertise-client-urls "http://127.0.0.1:$client" --listen-peer-urls "http://127.0.0.1:$peer" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "e0=http://127.0.0.1:$peer" \
      </dev/null >"$dir/etcd.log" 2>&1 &
    ETCD_PID=$!
    # Until its JSON gateway answers, which comes after the port opens.
    if await_ready "$ETCD_PID" "curl -sf -m 1 -X POST -d '{}' http://127.0.0.1:$client/v3/maintenance/status >/dev/null 2>&1"; then
      ETCD_ENDPOINT="127.0.0.1:$client"
      return 0
    fi
    stop_etcd
    echo "start_etcd: attempt $attempt on port $client failed:" >&2
    tail -n 5 "$dir/etcd.log" >&2 2>/dev/null || true
  done
  return 1
}

stop_etcd() {
  local pid=$ETCD_PID
  ETCD_PID=""
  stop_pid "$pid"
}

# A throwaway PostgreSQL (Debian's postgresql) on a free loopback port, its data under dir/pg,
# trusting local connections; the superuser `dlock` and its database `dlock`. PostgreSQL refuses
# to run as root: as root it runs as the `postgres` user Debian's package creates (setpriv execs,
# so the pid is the server's own). Sets POSTGRES_ENDPOINT (host:port) and POSTGRES_PID.
start_postgres() {
  local dir=$1 bin port attempt as=()
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [[ -x $bin/postgres ]] || { echo "start_postgres: PostgreSQL missing (run scripts/setup)" >&2; return 1; }
  mkdir -p "$dir/pg"
  if [[ $(id -u) == 0 ]]; then
    chmod o+x "$dir"
    chown postgres:postgres "$dir/pg"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
  "${as[@]}" "$bin/initdb" -D "$dir/pg/data" -U dlock --auth=trust -E UTF8 --no-sync \
    >"$dir/pg/initdb.log" 2>&1 || { tail -n 5 "$dir/pg/initdb.log" >&2; return 1; }
  for attempt in 1 2 3; do
    port=$(free_port)
    "${as[@]}" "$bin/postgres" -D "$dir/pg/data" -p "$port" -k "$dir/pg" -c listen_addresses=127.0.0.1 \
      -c fsync=off </dev/null >"$dir/pg/server.log" 2>&1 &
    POSTGRES_PID=$!
    if await_ready "$POSTGRES_PID" "'$bin/pg_isready' -q -h 127.0.0.1 -p $port" &&
       "${as[@]}" "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U dlock -d postgres -c "CREATE DATABASE dlock" \
         >>"$dir/pg/server.log" 2>&1; then
      POSTGRES_ENDPOINT="127.0.0.1:$port"
      return 0
    fi
    stop_postgres
    echo "start_postgres: attempt $attempt on port $port failed:" >&2
    tail -n 5 "$dir/pg/server.log" >&2 2>/dev/null || true
  done
  return 1
}

stop_postgres() {
  local pid=${POSTGRES_PID:-}
  POSTGRES_PID=""
  stop_pid "$pid"
}

use_dlock_library() {
  if [[ -n ${DLOCK_LIBRARY:-} ]]; then
    if [[ $DLOCK_LIBRARY != /* && ($DLOCK_LIBRARY == */* || -e $DLOCK_LIBRARY) ]]; then
      [[ -e $DLOCK_LIBRARY ]] || { echo "DLOCK_LIBRARY=$DLOCK_LIBRARY: no such file (relative to $PWD)" >&2; return 1; }
      DLOCK_LIBRARY=$(abs_path "${DLOCK_LIBRARY#./}")
    fi
  elif [[ -e $DLOCK_ROOT/build/libdlock.so ]]; then
    DLOCK_LIBRARY=$DLOCK_ROOT/build/libdlock.so
  fi
  export DLOCK_LIBRARY
}

abs_path() {
  case $1 in
  /*) printf '%s\n' "$1" ;;
  *) printf '%s\n' "$(pwd)/$1" ;;
  esac
}

configure() {
  local dir=$1
  shift
  local generator=()
  # Keep the generator of an existing build dir (cmake refuses to switch).
  if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$DLOCK_ROOT" -B "$dir" "${generator[@]}" "$@"
}
