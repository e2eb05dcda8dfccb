# shellcheck shell=bash
# Starts and stops a throwaway nginx (one worker, the Lua module, tests/nginx/app.lua) for
# run.sh and bench.sh. Source it after `set -euo pipefail`; needs REDIS_URL and DLOCK_LIBRARY.
#
#   nginx_start DIR     writes DIR/nginx.conf and starts nginx on a free loopback port; sets
#                       NGINX_PID (the master's), NGINX_PORT, NGINX_URL
#   nginx_stop          stops it by pid (master, then any worker left); safe to call twice
NGINX_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NGINX_BINDING=$(cd "$NGINX_TESTS/../.." && pwd)
# scripts/lib.sh gives free_port, await_ready, stop_pid; it also blanks REDIS_PORT and
# REDIS_URL, which the caller's bindings/test.sh set: kept across it.
saved_redis=("${REDIS_PORT:-}" "${REDIS_URL:-}")
# shellcheck source=SCRIPTDIR/../../../../scripts/lib.sh
source "$NGINX_TESTS/../../../../scripts/lib.sh"
REDIS_PORT=${saved_redis[0]}
REDIS_URL=${saved_redis[1]}
unset saved_redis

NGINX_PID=""
NGINX_PORT=""
NGINX_URL=""

# The load_module lines for ngx_lua: Debian's libnginx-mod-http-lua (and the NDK it needs),
# else whatever /etc/nginx/modules-enabled names, else nothing when nginx has it built in
# (OpenResty).
nginx_lua_modules() {
  local d
  for d in /usr/lib/nginx/modules /usr/share/nginx/modules /usr/lib64/nginx/modules; do
    if [[ -f $d/ngx_http_lua_module.so ]]; then
      [[ -f $d/ndk_http_module.so ]] && echo "load_module $d/ndk_http_module.so;"
      echo "load_module $d/ngx_http_lua_module.so;"
      return 0
    fi
  done
  if compgen -G '/etc/nginx/modules-enabled/*lua*.conf' >/dev/null; then
    echo "include /etc/nginx/modules-enabled/*.conf;"
    return 0
  fi
  if "$NGINX_BIN" -V 2>&1 | grep -q 'lua'; then return 0; fi
  echo "nginx_start: no ngx_lua module found (apt-get install libnginx-mod-http-lua)" >&2
  return 1
}

nginx_write_conf() {
  local dir=$1 port=$2 modules=$3
  cat >"$dir/nginx.conf" <<CONF
# Written by bindings/luajit/tests/nginx/lib.sh. Workers run as root: as nobody they could not
# read the test's private temporary directories.
user root;
worker_processes 1;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/error.log info;
$modules
# nginx clears the environment of its workers: name what dlock.lua (DLOCK_LIBRARY) and the
# application (REDIS_URL) read.
env DLOCK_LIBRARY;
env REDIS_URL;

events { worker_connections 1024; }

http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  default_type text/plain;
  lua_package_path "$NGINX_BINDING/?.lua;$NGINX_TESTS/?.lua;;";

  init_by_lua_block { require("app").init() }
  init_worker_by_lua_block { require("app").init_worker() }

  server {
    listen 127.0.0.1:$port;
    location = /ping { content_by_lua_block { require("app").ping() } }
    location = /init_refused { content_by_lua_block { require("app").init_refused() } }
    location = /hold { content_by_lua_block { require("app").hold() } }
    location = /letgo { content_by_lua_block { require("app").letgo() } }
    location = /wait { content_by_lua_block { require("app").wait() } }
    location = /contend { content_by_lua_block { require("app").contend() } }
    location = /overlaps { content_by_lua_block { require("app").overlaps() } }
    location = /lost { content_by_lua_block { require("app").lost() } }
    location = /lost_status { content_by_lua_block { require("app").lost_status() } }
    location = /run { content_by_lua_block { require("app").run() } }
    location = /logphase {
      content_by_lua_block { require("app").logphase() }
      log_by_lua_block { require("app").logphase_log() }
    }
    location = /logphase_status { content_by_lua_block { require("app").logphase_status() } }
    location = /gc { content_by_lua_block { require("app").gc() } }
    location = /killed { content_by_lua_block { require("app").killed() } }
    location = /elect { content_by_lua_block { require("app").elect() } }
    location = /setvalue { content_by_lua_block { require("app").setvalue() } }
    location = /inspect { content_by_lua_block { require("app").inspect() } }
    location = /break { content_by_lua_block { require("app").break_lock() } }
    location = /ask { content_by_lua_block { require("app").ask() } }
    location = /observe { content_by_lua_block { require("app").observe() } }
    location = /observe_init { content_by_lua_block { require("app").observe_init() } }
    location = /many { content_by_lua_block { require("app").many() } }
    location = /wait_many { content_by_lua_block { require("app").wait_many() } }
  }
}
CONF
}

nginx_start() {
  local dir=$1 modules attempt port
  NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
  [[ -x $NGINX_BIN ]] || { echo "nginx_start: nginx not found (apt-get install nginx libnginx-mod-http-lua)" >&2; return 1; }
  : "${REDIS_URL:?nginx_start: REDIS_URL is not set}"
  export REDIS_URL DLOCK_LIBRARY
  modules=$(nginx_lua_modules)
  mkdir -p "$dir/tmp"
  # free_port's port may be taken before nginx binds it: a few tries.
  for attempt in 1 2 3; do
    port=$(free_port)
    nginx_launch "$dir" "$port" "$modules" && return 0
    echo "nginx_start: attempt $attempt on port $port failed:" >&2
    tail -n 5 "$dir/error.log" "$dir/nginx.stdout" >&2 2>/dev/null || true
  done
  return 1
}

# nginx_launch DIR PORT MODULES: starts nginx on PORT; true once its worker answers
# (init_worker_by_lua has opened the clients by then), else stops it.
# shellcheck disable=SC2034 # NGINX_PORT, NGINX_URL are for the scripts that source this file
nginx_launch() {
  local dir=$1 port=$2 modules=$3
  nginx_write_conf "$dir" "$port" "$modules"
  : >"$dir/error.log"
  "$NGINX_BIN" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" </dev/null >"$dir/nginx.stdout" 2>&1 &
  NGINX_PID=$!
  if ! await_ready "$NGINX_PID" "curl -sf -m 1 http://127.0.0.1:$port/ping >/dev/null 2>&1"; then
    nginx_stop
    return 1
  fi
  NGINX_PORT=$port
  NGINX_URL="http://127.0.0.1:$port"
}

nginx_stop() {
  local pid=$NGINX_PID workers w
  NGINX_PID=""
  [[ -n $pid ]] || return 0
  workers=$(ps -o pid= --ppid "$pid" 2>/dev/null || true)
  stop_pid "$pid"  # SIGTERM, SIGKILL after 2 s
  # A worker the master left behind (SIGKILLed master): ours by pid, and still an nginx.
  for w in $workers; do
    if [[ $(ps -o comm= -p "$w" 2>/dev/null) == nginx ]]; then kill -KILL "$w" 2>/dev/null || true; fi
  done
}
