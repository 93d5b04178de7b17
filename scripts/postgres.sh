#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests (tests/tune/CMakeLists.txt):
#   scripts/postgres.sh start DIR PORT   make DIR/data once (initdb), then start the
#                                        server on 127.0.0.1:PORT, its socket in DIR,
#                                        superuser `postgres`, trust authentication
#   scripts/postgres.sh stop DIR         stop it
# Both do nothing when there is nothing to do, and print nothing on success.
# It runs Debian's server binaries (the newest /usr/lib/postgresql/N/bin, or
# PG_BIN) as the current user, or as the `postgres` user when run as root (CI
# does; the server refuses to run as root). When that user cannot reach DIR
# (a build tree under /root), the server's files go to a folder of
# ${TMPDIR:-/tmp} named after DIR.
set -euo pipefail

usage() { echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2
case "$cmd" in
  start) [ $# -eq 3 ] && [[ "$3" =~ ^[0-9]+$ ]] || usage; port=$3 ;;
  stop) [ $# -eq 2 ] || usage ;;
  *) usage ;;
esac

bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$bin" ] || [ ! -x "$bin/pg_ctl" ]; then
  echo "postgres.sh: no PostgreSQL server binaries (Debian package postgresql)" >&2
  exit 1
fi

root=0
[ "$(id -u)" -eq 0 ] && root=1
if [ $root -eq 1 ] && ! id postgres >/dev/null 2>&1; then
  echo "postgres.sh: running as root needs the \`postgres\` user (Debian's postgresql package makes it)" >&2
  exit 1
fi
as_postgres() {  # util-linux's setpriv: Debian 13's minimal root has no runuser
  setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
}
as_server() {  # in the server's folder: the user may not be allowed in the caller's
  if [ $root -eq 1 ]; then (cd "$dir" && as_postgres "$@"); else (cd "$dir" && "$@"); fi
}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ $root -eq 1 ]; then
  chown postgres: "$dir"
  if ! as_postgres test -w "$dir"; then
    dir=${TMPDIR:-/tmp}/trainkit-postgres-$(printf '%s' "$dir" | sha256sum | cut -c1-12)
    mkdir -p "$dir"
    chown postgres: "$dir"
  fi
  chmod 700 "$dir"
fi
data=$dir/data

running() { [ -f "$data/PG_VERSION" ] && as_server "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1; }

case "$cmd" in
  start)
    running && exit 0
    if [ ! -f "$data/PG_VERSION" ]; then
      rm -rf "$data"  # what an interrupted initdb left
      as_server "$bin/initdb" -D "$data" --username=postgres --auth=trust --encoding=UTF8 \
        --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
      echo "include_if_exists = 'trainkit.conf'" | as_server tee -a "$data/postgresql.conf" >/dev/null
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "postgres.sh: port $port on 127.0.0.1 is taken; configure the build with another" \
        "-DTRAINKIT_TEST_POSTGRES_PORT=..." >&2
      exit 1
    fi
    # Written at each start: the port follows the build's configuration. A
    # test server: its data need not survive a crash of the machine.
    as_server tee "$data/trainkit.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 32MB
max_connections = 60
EOF
    as_server "$bin/pg_ctl" start -D "$data" -l "$dir/server.log" -w -t 60 >/dev/null 2>&1 || {
      echo "postgres.sh: the server did not start; the end of $dir/server.log:" >&2
      tail -n 20 "$dir/server.log" >&2
      exit 1
    }
    ;;
  stop)
    running || exit 0
    as_server "$bin/pg_ctl" stop -D "$data" -m fast -w -t 60 >/dev/null
    ;;
esac
