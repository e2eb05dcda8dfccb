#!/usr/bin/env bash
# Runs every code example of README.md, the bindings' READMEs and every page under docs/ as
# printed (see check_examples.py), against a throwaway redis-server, dynalite, etcd and PostgreSQL on free
# loopback ports.
#
#   tests/readme/run.sh [BUILD_DIR]      # default: build
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$repo/scripts/lib.sh"
build=$(abs_path "${1:-build}")
[[ -e $build/libdlock.so ]] || { echo "readme examples: no $build/libdlock.so (build first)" >&2; exit 1; }

work=$(mktemp -d)
trap 'stop_redis; stop_dynalite; stop_etcd; stop_postgres; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
start_dynalite "$work"
start_etcd "$work"
start_postgres "$work"
cd "$repo"
python3 tests/readme/check_examples.py --source-dir "$repo" --build-dir "$build" \
  --redis "127.0.0.1:$REDIS_PORT" --dynalite "$DYNALITE_ENDPOINT" --etcd "$ETCD_ENDPOINT" \
  --postgres "$POSTGRES_ENDPOINT" \
  --docs-dir docs \
  README.md bindings/python/README.md bindings/node/README.md bindings/luajit/README.md
