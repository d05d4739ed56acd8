#!/usr/bin/env bash
# pgfence: install what the dev/test workflow needs, only what is missing.
# Idempotent; fast (no apt, no pip) when everything is already present.
#
#   apt (as root):  postgresql-<major>-cron, sqitch, libdbd-pg-perl
#                   (+ postgresql-<major>-pgtap, postgresql-<major>-plpgsql-check when
#                   the package lists offer them; optional)
#   apt (as root):  chromium, for the dashboard's browser tests (tests/test_dashboard_browser.py,
#                   Playwright driving /usr/bin/chromium: Playwright's own browser download is
#                   not used)
#   python:         $REPO/.venv with psycopg, psycopg-pool, pytest, pytest-timeout, hypothesis,
#                   mypy, testcontainers, fastapi + uvicorn + httpx (examples/fastapi_app.py and
#                   its test), httpx2 (what starlette's TestClient asks for since 1.x: with
#                   httpx alone it warns), playwright, prometheus_client (the tests' parser), and
#                   `pip install -e python_client[dashboard]` (starlette, uvicorn, jinja2, ...)
#   node:           `npm ci` in clients/node from its committed package-lock.json (pg, and
#                   typescript for the declarations check), when node and npm are installed
#
# <major> is the highest installed PostgreSQL server (/usr/lib/postgresql/N/bin/postgres).
# If the package lists have no postgresql-<major>-cron (or no server is installed),
# the newest postgresql-N + postgresql-N-cron pair offered is installed instead;
# scripts/pg.sh always uses the highest installed major, so that one gets used.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$REPO"
log() { printf 'setup.sh: %s\n' "$*" >&2; }
die() { printf 'setup.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- apt ------
installed_major() {
  local best="" d n
  for d in /usr/lib/postgresql/*/bin/postgres; do
    [[ -x "$d" ]] || continue
    n="${d#/usr/lib/postgresql/}"; n="${n%%/*}"
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    if [[ -z "$best" || "$n" -gt "$best" ]]; then best="$n"; fi
  done
  printf '%s' "$best"
}

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
pkg_available() { apt-cache show "$1" >/dev/null 2>&1; }

MAJOR="$(installed_major)"
required=(sqitch libdbd-pg-perl)
if [[ -n "$MAJOR" ]]; then required+=("postgresql-${MAJOR}-cron"); fi

missing=()
[[ -n "$MAJOR" ]] || missing+=("postgresql-server")
for p in "${required[@]}"; do pkg_installed "$p" || missing+=("$p"); done
# the binaries that matter, in case dpkg says yes but the files are gone
if [[ -n "$MAJOR" && ! -f "/usr/lib/postgresql/${MAJOR}/lib/pg_cron.so" ]] && pkg_installed "postgresql-${MAJOR}-cron"; then
  missing+=("postgresql-${MAJOR}-cron(reinstall)")
fi
if ! command -v sqitch >/dev/null 2>&1 && pkg_installed sqitch; then missing+=("sqitch(binary)"); fi
# tests/test_sql_lint.py skips without plpgsql_check: as root, install it when the
# package lists already offer it (no apt-get update just for an optional package).
if [[ -n "$MAJOR" && "$(id -u)" -eq 0 ]] && ! pkg_installed "postgresql-${MAJOR}-plpgsql-check" \
   && pkg_available "postgresql-${MAJOR}-plpgsql-check"; then
  missing+=("postgresql-${MAJOR}-plpgsql-check")
fi

if ((${#missing[@]})); then
  log "missing: ${missing[*]}"
  if [[ "$(id -u)" -ne 0 ]]; then
    m="${MAJOR:-15}"
    die "not root; install them with:
  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-${m} postgresql-${m}-cron sqitch libdbd-pg-perl"
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "apt-get update"
  apt-get update -qq
  if [[ -z "$MAJOR" ]] || ! pkg_available "postgresql-${MAJOR}-cron"; then
    # newest N offering both postgresql-N and postgresql-N-cron
    best=""
    while read -r name; do
      n="${name#postgresql-}"; n="${n%-cron}"
      [[ "$n" =~ ^[0-9]+$ ]] || continue
      pkg_available "postgresql-${n}" || continue
      if [[ -z "$best" || "$n" -gt "$best" ]]; then best="$n"; fi
    done < <(apt-cache pkgnames postgresql- 2>/dev/null | grep -E '^postgresql-[0-9]+-cron$' || true)
    [[ -n "$best" ]] || die "no postgresql-N-cron package in the apt package lists"
    log "postgresql-${MAJOR:-?}-cron not available; using PostgreSQL ${best}"
    MAJOR="$best"
  fi
  pkgs=("postgresql-${MAJOR}" "postgresql-${MAJOR}-cron" sqitch libdbd-pg-perl)
  for opt in "postgresql-${MAJOR}-pgtap" "postgresql-${MAJOR}-plpgsql-check"; do
    pkg_available "$opt" && pkgs+=("$opt")
  done
  log "apt-get install ${pkgs[*]}"
  # Debian's postgresql-common would create and start a default cluster on 5432;
  # we run our own throwaway cluster (scripts/pg.sh), so skip that.
  mkdir -p /etc/postgresql-common/createcluster.d
  [[ -f /etc/postgresql-common/createcluster.d/pgfence.conf ]] || \
    printf 'create_main_cluster = false\n' > /etc/postgresql-common/createcluster.d/pgfence.conf
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  [[ -f "/usr/lib/postgresql/${MAJOR}/lib/pg_cron.so" ]] || \
    apt-get install -y -qq --reinstall "postgresql-${MAJOR}-cron" >/dev/null
  log "apt packages installed"
fi

# The dashboard's browser tests drive the Debian chromium (root only; they skip without it).
if [[ ! -x /usr/bin/chromium ]]; then
  if [[ "$(id -u)" -eq 0 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get update (chromium)"
    apt-get update -qq
    log "apt-get install chromium"
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    log "warning: /usr/bin/chromium missing (sudo apt-get install chromium); the browser tests will skip"
  fi
fi

# ------------------------------------------------------------- python ------
VENV="$REPO/.venv"
STAMP="$VENV/.stamp"
PY_DEPS=("psycopg[binary]>=3.1" "psycopg-pool>=3.2" "pytest>=8" "pytest-timeout" "hypothesis>=6" "mypy" "testcontainers>=4"
         "fastapi>=0.100" "uvicorn>=0.23" "httpx>=0.24" "httpx2>=2" "playwright>=1.43" "prometheus_client>=0.17")

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  log "creating $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  rm -f "$STAMP"
fi

need_pip=0
[[ -f "$STAMP" ]] || need_pip=1
for dep in "$REPO/scripts/setup.sh" "$REPO/python_client/pyproject.toml"; do
  if [[ -f "$dep" && "$dep" -nt "$STAMP" ]]; then need_pip=1; fi
done

if ((need_pip)); then
  log "pip install (dev/test dependencies)"
  # (the grep drops this machine's noisy "Location ... is ignored" pip index warnings)
  "$VENV/bin/python" -m pip install -q "${PY_DEPS[@]}" 2> >(grep -v 'neither a file nor a directory' >&2)
  if [[ -f "$REPO/python_client/pyproject.toml" ]]; then
    log "pip install -e python_client[dashboard]"
    "$VENV/bin/python" -m pip install -q -e "$REPO/python_client[dashboard]" 2> >(grep -v 'neither a file nor a directory' >&2)
  fi
  touch "$STAMP"
fi
# --------------------------------------------------------------- node ------
# The Node.js client's packages, as the Python ones: only when missing or when
# package.json / package-lock.json changed since the last install (stamped).
NODE_DIR="$REPO/clients/node"
NODE_STAMP="$NODE_DIR/node_modules/.pgfence-stamp"
node_note="node: skipped"
if [[ -f "$NODE_DIR/package-lock.json" ]]; then
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    need_npm=0
    [[ -f "$NODE_STAMP" ]] || need_npm=1
    for dep in "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json" "$REPO/scripts/setup.sh"; do
      if [[ -f "$NODE_STAMP" && "$dep" -nt "$NODE_STAMP" ]]; then need_npm=1; fi
    done
    if ((need_npm)); then
      log "npm ci (clients/node)"
      (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
      touch "$NODE_STAMP"
    fi
    node_note="node $(node --version)"
  else
    log "node/npm not found: the Node.js client's tests (tests/test_node_client.py) will be skipped"
  fi
fi
log "ok (PostgreSQL ${MAJOR}, venv $VENV, ${node_note})"
