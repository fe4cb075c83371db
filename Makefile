# The two commands of the quick start: `make demo` and `make test`. Both bootstrap first.
.PHONY: bootstrap demo test lint down

bootstrap:
	@scripts/bootstrap

demo: bootstrap
	.venv/bin/keystone stack up

test: bootstrap lint
	.venv/bin/pytest

lint:
	.venv/bin/ruff check .

down:
	.venv/bin/keystone stack down
