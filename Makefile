# pgfence developer/test entry points (GNU make). `make` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

REPO   := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
PG     := $(REPO)/scripts/pg.sh
PY     := $(REPO)/.venv/bin/python
SQITCH ?= sqitch

# Sqitch target for the local throwaway cluster (override: make deploy SQITCH_TARGET=db:pg://...).
SQITCH_TARGET ?= $(shell $(PG) dsn | sed 's|^postgresql://|db:pg://|')
export SQITCH_TARGET
# sqitch records who deployed; give it something when git/sqitch config has nothing.
export SQITCH_FULLNAME ?= pgfence dev
export SQITCH_EMAIL ?= pgfence-dev@localhost

PYTEST_ARGS ?=
QUICK ?=

# true when sqitch.plan exists and lists at least one change
PLAN_HAS_CHANGES = [[ -f $(REPO)/sqitch.plan ]] && grep -qvE '^[[:space:]]*([%\#]|$$)' $(REPO)/sqitch.plan

.PHONY: help setup db deploy revert verify stop psql test demo dashboard bench chaos typecheck clean

help: ## list targets
	@grep -hE '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([^:]+):.*## (.*)/  \1\t\2/' | expand -t 14

setup: ## install missing apt packages, create .venv and pip install (idempotent)
	@$(REPO)/scripts/setup.sh

db: setup ## start the throwaway local PostgreSQL cluster (with pg_cron)
	@$(PG) start

deploy: db ## sqitch deploy the schema (target: SQITCH_TARGET, default the local cluster)
	@if $(PLAN_HAS_CHANGES); then \
	  cd $(REPO) && $(SQITCH) deploy --target '$(SQITCH_TARGET)'; \
	else echo "deploy: sqitch.plan missing or has no changes; skipping sqitch deploy"; fi

revert: db ## sqitch revert -y (everything)
	@if $(PLAN_HAS_CHANGES); then \
	  cd $(REPO) && $(SQITCH) revert -y --target '$(SQITCH_TARGET)'; \
	else echo "revert: sqitch.plan missing or has no changes; nothing to revert"; fi

verify: db ## sqitch verify
	@if $(PLAN_HAS_CHANGES); then \
	  cd $(REPO) && $(SQITCH) verify --target '$(SQITCH_TARGET)'; \
	else echo "verify: sqitch.plan missing or has no changes; nothing to verify"; fi

stop: ## stop the local cluster
	@$(PG) stop

psql: db ## psql into the local database
	@$(PG) psql

test: setup ## run the test suite on its own throwaway cluster (PYTEST_ARGS=... passed to pytest)
	cd $(REPO) && $(PY) -m pytest -q tests $(PYTEST_ARGS)

demo: db deploy ## run the demo (examples/demo.py: a killed, a frozen and a manual-review worker)
	cd $(REPO) && $(PY) examples/demo.py

dashboard: db deploy ## serve the web dashboard on the local cluster with demo jobs (examples/dashboard_demo.py)
	cd $(REPO) && $(PY) examples/dashboard_demo.py $(if $(BIND),--bind $(BIND))

bench: db deploy ## run the benchmark (QUICK=1 for a short run)
	cd $(REPO) && $(PY) bench/run.py $(if $(QUICK),--quick)

chaos: setup ## run the full chaos suite (its own cluster, first free port from 54339; make test runs the short form)
	cd $(REPO) && $(PY) -m pytest -q tests/chaos --chaos-full $(PYTEST_ARGS)

typecheck: setup ## mypy on python_client/pgfence and examples/; tsc on clients/node's declarations
	cd $(REPO) && MYPYPATH=python_client $(PY) -m mypy python_client/pgfence examples
	@if command -v node >/dev/null 2>&1; then cd $(REPO)/clients/node && node node_modules/typescript/bin/tsc -p tsconfig.json; fi

clean: ## stop the cluster, remove .pgdata and .venv
	-@$(PG) stop
	@d="$$($(PG) datadir 2>/dev/null || true)"; \
	  case "$$d" in $(REPO)/.pgdata|/tmp/pgfence-*) rm -rf "$$d";; esac
	rm -rf $(REPO)/.pgdata $(REPO)/.pgdata-test $(REPO)/.pgdata-chaos $(REPO)/.pgdata-restart $(REPO)/.venv
