# The two commands of the quick start: `make demo` and `make test`. Both bootstrap first.
.PHONY: bootstrap demo test lint bench down

bootstrap:
	@scripts/bootstrap

demo: bootstrap
	.venv/bin/keystone stack up
	.venv/bin/keystone demo

test: bootstrap lint
	.venv/bin/pytest

lint:
	.venv/bin/ruff check .

bench: bootstrap
	.venv/bin/keystone stack up
	.venv/bin/python -m keystone.loadtest.proxy_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_plan_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_plan_bench --write-docs --object-fields 20
	.venv/bin/python -m keystone.loadtest.e2e_bench --write-docs

down:
	.venv/bin/keystone stack down
