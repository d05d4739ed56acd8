#!/usr/bin/env bash
# pgfence: throwaway local PostgreSQL cluster for development and tests.
#
#   scripts/pg.sh start    initdb if needed, start, create the database, wait until
#                          `SELECT 1` works in it, CREATE EXTENSION pg_cron (idempotent);
#                          on a running cluster whose pg_cron scheduler is gone (its
#                          database was dropped), restart it (every make target that
#                          starts the cluster: db, deploy, demo, bench, psql, ...)
#   scripts/pg.sh stop     pg_ctl stop -m fast (if running)
#   scripts/pg.sh status   exit 0 when running, 3 when not
#   scripts/pg.sh dsn      print postgresql://postgres@127.0.0.1:<port>/<db>
#   scripts/pg.sh psql ... psql against the dsn, extra args passed through
#   scripts/pg.sh datadir  print the data directory in use
#
# Environment: PGFENCE_PGDATA (default $REPO/.pgdata), PGFENCE_PGPORT (54329),
#              PGFENCE_DB (pgfence), PGFENCE_PG_BINDIR (default: highest
#              /usr/lib/postgresql/N/bin that has a `postgres` binary).
#
# THROWAWAY CLUSTER: trust authentication for local socket, 127.0.0.1/32 and ::1,
# superuser `postgres`, listening on 127.0.0.1 only. Never use this for real data.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
PORT="${PGFENCE_PGPORT:-54329}"
DB="${PGFENCE_DB:-pgfence}"
REPO_HASH="$(printf '%s' "$REPO" | sha1sum | cut -c1-12)"
START_TIMEOUT=60

log()  { printf 'pg.sh: %s\n' "$*" >&2; }
warn() { printf 'pg.sh: WARNING: %s\n' "$*" >&2; }
die()  { printf 'pg.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# --- PostgreSQL binaries -----------------------------------------------------
find_bindir() {
  if [[ -n "${PGFENCE_PG_BINDIR:-}" ]]; then
    [[ -x "$PGFENCE_PG_BINDIR/postgres" ]] || die "PGFENCE_PG_BINDIR=$PGFENCE_PG_BINDIR has no postgres binary"
    printf '%s\n' "$PGFENCE_PG_BINDIR"; return
  fi
  local best="" n d
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/postgres" ]] || continue
    n="$(basename "$(dirname "$d")")"
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    if [[ -z "$best" || "$n" -gt "$best" ]]; then best="$n"; fi
  done
  [[ -n "$best" ]] || die "no PostgreSQL server found under /usr/lib/postgresql/*/bin (run scripts/setup.sh)"
  printf '/usr/lib/postgresql/%s/bin\n' "$best"
}

# psql: prefer the bindir's psql (same major), fall back to PATH.
find_psql() {
  if [[ -x "$BINDIR/psql" ]]; then printf '%s\n' "$BINDIR/psql"
  elif command -v psql >/dev/null 2>&1; then command -v psql
  else die "psql not found"; fi
}

dsn() { printf 'postgresql://postgres@127.0.0.1:%s/%s\n' "$PORT" "$DB"; }

# `dsn` must work without any server installed (Makefile calls it at parse time).
if [[ "${1:-}" == "dsn" ]]; then dsn; exit 0; fi

BINDIR="$(find_bindir)"
PSQL="$(find_psql)"

IS_ROOT=0
[[ "$(id -u)" -eq 0 ]] && IS_ROOT=1

# Run a server-side command (initdb/pg_ctl): PostgreSQL refuses to run as root,
# so as root we run it as the `postgres` OS user, from / (cwd may be unreadable).
as_pg() {
  if [[ "$IS_ROOT" -eq 1 ]]; then
    (cd / && runuser -u postgres -- "$@") 9>&-
  else
    "$@" 9>&-
  fi
}

# --- data directory ----------------------------------------------------------
if [[ "$IS_ROOT" -eq 1 ]] && ! id postgres >/dev/null 2>&1; then
  log "creating OS user postgres"
  useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

PGDATA_DEFAULT="$REPO/.pgdata"
PGDATA="${PGFENCE_PGDATA:-$PGDATA_DEFAULT}"
# One lock per data directory (the dev, test and chaos clusters of one checkout start
# independently), and one fallback directory per data directory: the default cluster
# keeps /tmp/pgfence-<hash of the checkout>, any other one gets a name of its own.
PGDATA_HASH="$(printf '%s' "$PGDATA" | sha1sum | cut -c1-12)"
LOCK_FILE="/tmp/pgfence-${PGDATA_HASH}.lock"
if [[ "$IS_ROOT" -eq 1 ]]; then
  parent="$(dirname "$PGDATA")"
  # `test -x` as postgres fails unless every ancestor of $parent is traversable too.
  if [[ ! -d "$parent" ]] || ! runuser -u postgres -- test -x "$parent" 2>/dev/null; then
    if [[ "$PGDATA" == "$PGDATA_DEFAULT" ]]; then fallback="/tmp/pgfence-${REPO_HASH}"
    else fallback="/tmp/pgfence-${PGDATA_HASH}"; fi
    if [[ "${1:-}" == start || "${1:-}" == status ]]; then
      warn "$parent is not traversable by OS user postgres; using data dir $fallback instead of $PGDATA"
    fi
    PGDATA="$fallback"
  fi
fi
# Unix socket lives in the data dir; sun_path is limited to 107 bytes.
SOCKDIR="$PGDATA"
if (( ${#SOCKDIR} + 20 > 100 )); then
  SOCKDIR="/tmp"
  warn "data dir path too long for a unix socket; socket goes to $SOCKDIR"
fi
LOGFILE="$PGDATA/server.log"

pkglibdir() {
  if [[ -x "$BINDIR/pg_config" ]]; then "$BINDIR/pg_config" --pkglibdir
  else printf '%s\n' "$(dirname "$BINDIR")/lib"; fi
}
have_pg_cron() { [[ -f "$(pkglibdir)/pg_cron.so" ]]; }

# --- helpers -----------------------------------------------------------------
# A live process, not a zombie (kill -0 succeeds on zombies; PostgreSQL's own lock
# file check therefore mistakes an unreaped dead postmaster for a running one).
proc_alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != "Z" && "$st" != "X" ]]
}
pid_from_file() { [[ -f "$PGDATA/postmaster.pid" ]] && head -n1 "$PGDATA/postmaster.pid" 2>/dev/null || true; }

is_running() {
  [[ -f "$PGDATA/PG_VERSION" ]] || return 1
  local pid; pid="$(pid_from_file)"
  [[ -n "$pid" && "$pid" =~ ^[0-9]+$ ]] || return 1
  proc_alive "$pid" || return 1
  # PID reuse after kill -9: must really be a postgres process.
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'postgres' || return 1
  as_pg "$BINDIR/pg_ctl" status -D "$PGDATA" >/dev/null 2>&1
}

# After `kill -9` of the postmaster: drop the stale lock file so a new server can
# start, and give orphaned backends a moment to notice postmaster death and exit
# (otherwise: "pre-existing shared memory block is still in use").
clear_stale() {
  is_running && return 0
  local f pid
  for f in "$PGDATA/postmaster.pid" "$SOCKDIR/.s.PGSQL.${PORT}.lock"; do
    [[ -f "$f" ]] || continue
    pid="$(head -n1 "$f" 2>/dev/null | tr -d ' -')"
    if [[ "$pid" =~ ^[0-9]+$ ]] && proc_alive "$pid"; then
      [[ "$f" == "$PGDATA/postmaster.pid" ]] || continue  # socket lock owned by another live server
    fi
    log "removing stale $f (server not running)"
    rm -f "$f"
  done
  wait_orphans
}

# Server processes have the data dir as cwd; wait (max 15 s) for leftovers to exit.
wait_orphans() {
  local i p found real
  real="$(cd "$PGDATA" && pwd -P)"
  for i in $(seq 1 30); do
    found=""
    for p in /proc/[0-9]*; do
      if [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$real" ]]; then found="${p#/proc/}"; break; fi
    done
    [[ -z "$found" ]] && return 0
    (( i == 1 )) && log "waiting for leftover server process(es) (pid $found) to exit"
    sleep 0.5
  done
  warn "leftover server process $found still running"
}

psql_q() { # psql_q <dbname> <sql>: one unaligned, tuples-only value
  "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 \
    "postgresql://postgres@127.0.0.1:${PORT}/$1?connect_timeout=5" -c "$2"
}

write_conf() {
  local preload="" cronconf=""
  if have_pg_cron; then
    preload="shared_preload_libraries = 'pg_cron'"
    cronconf="cron.database_name = '${DB}'
cron.use_background_workers = on"
  else
    warn "pg_cron library not found at $(pkglibdir)/pg_cron.so: starting WITHOUT pg_cron (tests will report pg_cron missing; run scripts/setup.sh)"
    preload="# pg_cron not installed: shared_preload_libraries left unset"
  fi
  local tmp="$PGDATA/pgfence.conf.tmp"
  cat > "$tmp" <<CONF
# Generated by scripts/pg.sh at every start; edits here are overwritten.
listen_addresses = '127.0.0.1'
port = ${PORT}
unix_socket_directories = '${SOCKDIR}'
${preload}
${cronconf}
max_worker_processes = 32
max_connections = 300
fsync = on
synchronous_commit = on
full_page_writes = on
# A queue writes a lot of WAL (every job is inserted and updated twice): with the
# default 1GB, bulk loads forced a checkpoint every few seconds and every page
# touched after one was logged whole (claim+complete with 1,000,000 queued:
# 16.1k jobs/s at 1GB, 20.7k at 4GB; 20,000 queued: 23.7k). Durable either way.
max_wal_size = 4GB
# The launcher visits a database every naptime (default 1min); pgfence.jobs asks to
# be vacuumed after 1% of it changed, which a busy queue reaches in seconds. Sustained
# drain, 90 s: default 1min 24k jobs/s median falling to 16k (3M dead rows);
# 5s: 31k median, 28k at worst, dead rows under 0.35M; 1s: 27k (vacuum never rests).
# Since vacuum no longer truncates pgfence.jobs (the table keeps its largest size):
# 120 s soaks, taking turns, 5s: 23.0k/23.2k median, 93->151 MB and 105->136 MB, up to
# 300k dead rows; 2s: 24.7k/22.7k, 47->77 MB and 67->76 MB, 107k. 1s: a smaller table
# but the soak's 1.2x bound missed more often (docs/performance.md).
autovacuum_naptime = 2s
log_min_messages = warning
logging_collector = off
timezone = 'UTC'
log_timezone = 'UTC'
CONF
  mv "$tmp" "$PGDATA/pgfence.conf"
  # Throwaway cluster: trust everything local.
  cat > "$PGDATA/pg_hba.conf" <<'HBA'
# Generated by scripts/pg.sh. THROWAWAY DEV/TEST CLUSTER: trust auth, local only.
local   all   all                 trust
host    all   all   127.0.0.1/32  trust
host    all   all   ::1/128       trust
HBA
  if [[ "$IS_ROOT" -eq 1 ]]; then chown postgres: "$PGDATA/pgfence.conf" "$PGDATA/pg_hba.conf"; fi
}

init_cluster() {
  log "initdb in $PGDATA ($("$BINDIR/postgres" --version))"
  mkdir -p "$PGDATA"
  if [[ "$IS_ROOT" -eq 1 ]]; then chown postgres: "$PGDATA"; fi
  chmod 700 "$PGDATA"
  local out
  out="$(mktemp)"
  as_pg "$BINDIR/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$out" 2>&1 \
    || { cat "$out" >&2; rm -f "$out"; die "initdb failed"; }
  rm -f "$out"
  printf "\n# pgfence settings (see scripts/pg.sh)\ninclude_if_exists = 'pgfence.conf'\n" >> "$PGDATA/postgresql.conf"
}

wait_ready() {
  local deadline=$(( SECONDS + START_TIMEOUT )) err=""
  while :; do
    if err="$(psql_q "$DB" 'SELECT 1' 2>&1)" && [[ "$err" == "1" ]]; then return 0; fi
    if (( SECONDS >= deadline )); then
      printf 'pg.sh: ERROR: database %s not ready after %ss: %s\n--- tail of %s ---\n' \
        "$DB" "$START_TIMEOUT" "$err" "$LOGFILE" >&2
      tail -n 40 "$LOGFILE" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
}

ensure_db() {
  local deadline=$(( SECONDS + START_TIMEOUT )) exists="" err=""
  # wait for the maintenance db first
  until err="$(psql_q postgres 'SELECT 1' 2>&1)"; do
    if (( SECONDS >= deadline )); then
      printf 'pg.sh: ERROR: server not accepting connections after %ss: %s\n--- tail of %s ---\n' \
        "$START_TIMEOUT" "$err" "$LOGFILE" >&2
      tail -n 40 "$LOGFILE" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
  exists="$(psql_q postgres "SELECT 1 FROM pg_database WHERE datname = '${DB//\'/\'\'}'")"
  if [[ "$exists" != "1" ]]; then
    log "creating database $DB"
    psql_q postgres "CREATE DATABASE \"${DB//\"/\"\"}\"" >/dev/null
  fi
  wait_ready
  if have_pg_cron; then
    psql_q "$DB" "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS pg_cron" >/dev/null
  fi
}

# How many pg_cron schedulers (a background worker) run: waits up to 5 s while the
# answer is 0 (after a failed start it comes back a second later); prints nothing when
# the query fails.
cron_schedulers() {
  local deadline=$(( SECONDS + 5 )) n
  while :; do
    n="$(psql_q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_cron launcher'" 2>/dev/null)" || return 0
    if [[ "$n" != "0" ]] || (( SECONDS >= deadline )); then printf '%s\n' "$n"; return 0; fi
    sleep 0.5
  done
}

# Something (another checkout's cluster, a system PostgreSQL, any program) already
# accepts connections on 127.0.0.1:$PORT.
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

die_port_taken() {
  die "port $PORT on 127.0.0.1 is already taken ($1); start this cluster on another port with PGFENCE_PGPORT=<port> (e.g. PGFENCE_PGPORT=$((PORT + 1)) make db), and use that variable with every make target"
}

# After a failed start: did the server fail because the port is someone else's? The
# probe above misses a program that took the port after it, or holds it without
# accepting connections, and another live server using the same socket directory and
# port (its socket lock file, which clear_stale leaves alone while its owner lives).
# $1: the size of the log before this start (only what this start wrote is read).
start_failed_on_port() {
  local log_tail lock pid
  log_tail="$(tail -c +"$(( $1 + 1 ))" "$LOGFILE" 2>/dev/null | tail -n 40 || true)"
  if grep -qE 'could not bind .*Address already in use|could not create any TCP/IP sockets' <<<"$log_tail"; then
    die_port_taken "the server could not bind it: another program holds it"
  fi
  lock="$SOCKDIR/.s.PGSQL.${PORT}.lock"
  if grep -qF "lock file \"$lock\" already exists" <<<"$log_tail" && [[ -f "$lock" ]]; then
    pid="$(head -n1 "$lock" 2>/dev/null | tr -d ' -')"
    if [[ "$pid" =~ ^[0-9]+$ ]] && proc_alive "$pid"; then
      die_port_taken "another server (pid $pid) uses socket $SOCKDIR/.s.PGSQL.${PORT}"
    fi
  fi
}

cmd_start() {
  exec 9>"$LOCK_FILE"
  flock -w 120 9 || die "could not lock $LOCK_FILE"
  if is_running; then
    ensure_db
    # pg_cron's scheduler exits for good when its database is dropped (DROP DATABASE ...
    # WITH (FORCE) ends it cleanly, and a clean exit is never restarted): no sweeper pass,
    # no schedule fires until the server starts again. Only when the server says so (a
    # failed query is no answer) and the scheduler's database is this one, which exists.
    if have_pg_cron && [[ "$(cron_schedulers)" == "0" ]] \
         && [[ "$(psql_q postgres "SHOW cron.database_name" 2>/dev/null)" == "$DB" ]]; then
      warn "pg_cron's scheduler is not running (was database $DB dropped and made again?); restarting the cluster to start it (its sessions end)"
      as_pg "$BINDIR/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 -s
    else
      log "running: $(dsn) (data dir $PGDATA)"
      return 0
    fi
  fi
  if port_taken; then
    die_port_taken "another checkout's cluster, a system PostgreSQL, or another program accepts connections on it"
  fi
  [[ -f "$PGDATA/PG_VERSION" ]] || init_cluster
  if [[ "$IS_ROOT" -eq 1 ]]; then chown -R postgres: "$PGDATA"; fi
  clear_stale
  write_conf
  local attempt log_size
  for attempt in 1 2 3 4 5; do
    log_size="$(stat -c %s "$LOGFILE" 2>/dev/null || echo 0)"
    if as_pg "$BINDIR/pg_ctl" start -D "$PGDATA" -l "$LOGFILE" -w -t "$START_TIMEOUT" -s; then
      break
    fi
    start_failed_on_port "$log_size"
    if (( attempt < 5 )) && tail -n 20 "$LOGFILE" 2>/dev/null \
         | grep -qE 'pre-existing shared memory block|lock file .* already exists|could not create lock file'; then
      warn "leftover processes from a previous server still hold resources; retrying in 2s"
      clear_stale; wait_orphans; sleep 2; continue
    fi
    printf 'pg.sh: ERROR: pg_ctl start failed\n--- tail of %s ---\n' "$LOGFILE" >&2
    tail -n 40 "$LOGFILE" >&2 || true
    exit 1
  done
  ensure_db
  log "started: $(dsn) (data dir $PGDATA)"
}

cmd_stop() {
  if is_running; then
    as_pg "$BINDIR/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 -s
    log "stopped"
  else
    log "not running"
  fi
}

cmd_status() {
  if is_running; then
    printf 'running: %s (pid %s, data dir %s)\n' "$(dsn)" "$(pid_from_file)" "$PGDATA"
  else
    printf 'not running (data dir %s)\n' "$PGDATA"
    exit 3
  fi
}

case "${1:-}" in
  start)   cmd_start ;;
  stop)    cmd_stop ;;
  status)  cmd_status ;;
  datadir) printf '%s\n' "$PGDATA" ;;
  psql)    shift; exec "$PSQL" -X "$(dsn)" "$@" ;;
  *) printf 'usage: %s {start|stop|status|dsn|psql [args]|datadir}\n' "$0" >&2; exit 2 ;;
esac
