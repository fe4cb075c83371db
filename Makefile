# The two commands of the quick start: `make demo` and `make test`. Both bootstrap first.
# `make check` is the lane without a stack, under a minute: lint and every test that needs
# neither the embedded stack nor Spark nor a wheel build (markers `stack`, `spark`, `wheel`).
.PHONY: bootstrap demo test check lint docs bench down

bootstrap:
	@scripts/bootstrap

demo: bootstrap
	.venv/bin/keystone stack up
	.venv/bin/keystone demo

# Two workers (tests/support/parallel.py): the cluster tests on their own stack first, beside
# the tests without a stack; then the rest beside one stack, a module to a worker, the tests
# that restart a service alone.
test: bootstrap lint docs
	.venv/bin/pytest -n 2

check: bootstrap lint
	.venv/bin/pytest -q -n 2 -m "not stack and not spark and not wheel"

# Style, and the packages' one direction of imports (the contracts in pyproject.toml).
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports

# The documentation site, into build/site. --strict: a broken link, anchor or nav entry, or a
# reference page the code can no longer generate (docs/gen_reference.py), fails the build.
# NO_MKDOCS_2_WARNING: Material's banner about its end of life, printed on every build.
docs:
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d build/site

# The router as deployed beside Flink first (it installs PyFlink into a virtualenv of its own
# in the cache, once: loadtest/flink.py), then each part on its own.
bench: bootstrap
	.venv/bin/keystone stack up
	.venv/bin/python -m keystone.loadtest.deployed_bench --write-docs
	.venv/bin/python -m keystone.loadtest.deployed_bench --rates none --catch-up 500000 --write-docs
	.venv/bin/python -m keystone.loadtest.proxy_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_plan_bench --write-docs
	.venv/bin/python -m keystone.loadtest.router_plan_bench --write-docs --object-fields 20
	.venv/bin/python -m keystone.loadtest.router_plan_bench --write-docs --hygiene
	.venv/bin/python -m keystone.loadtest.e2e_bench --write-docs
	.venv/bin/python -m keystone.loadtest.exactly_once_bench --write-docs
	.venv/bin/python -m keystone.loadtest.recovery_bench --write-docs
	.venv/bin/python -m keystone.loadtest.shadow_bench --write-docs
	.venv/bin/python -m keystone.loadtest.idle_bench --write-docs
	.venv/bin/keystone stack down  # the security benchmark starts the stack each way itself
	.venv/bin/python -m keystone.loadtest.security_bench --write-docs

down:
	.venv/bin/keystone stack down
