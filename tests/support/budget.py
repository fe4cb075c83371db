"""Each test module's time against its budget, printed at the end of every run, so that a module
growing past its share of the suite's 25 minutes shows the day it does (`BUDGETS`; a module not
named there has `DEFAULT_SECONDS`). The time a session's fixtures take to start (the stack, a
shared router) is counted apart, not in the module whose test happened to ask first.

Printed, never asserted: a slow machine is not a failing test (DEVELOPERS: speed is measured,
not asserted). `--budgets-only-over` prints only the modules over their budget.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

DEFAULT_SECONDS = 30.0
QUICK_SECONDS = 1.0  # modules quicker are counted, not listed
WAITS_SHOWN = 5  # the tests that waited longest for their turn with the stack
# Modules whose share is larger: what they prove needs real services and Spark applications.
# Seconds on this 2-core machine, with a margin of about a fifth over a quiet run.
BUDGETS: dict[str, float] = {
    # A router frozen twice past its alert's `for`, and redeployed once.
    "tests/alerts/test_notifications.py": 200,
    "tests/cluster/test_nodes.py": 330,  # one load for the nodes' and a fronting cluster's loss
    "tests/cluster/test_sizing.py": 180,
    "tests/control/test_api.py": 90,
    "tests/control/test_backfills.py": 30,
    "tests/control/test_fleet.py": 120,
    "tests/control/test_fronting.py": 150,
    "tests/control/test_redrive_browser.py": 90,
    "tests/control/test_rewind_browser.py": 90,
    # Three shadows compared, then one dropped, one promoted (a redeploy), one left to expire.
    "tests/control/test_shadows.py": 180,
    "tests/control/test_ui.py": 120,
    "tests/dashboards/test_live.py": 120,
    "tests/dashboards/test_generated.py": 60,
    "tests/ingest_proxy/test_proxy.py": 90,
    "tests/loadtest/test_bench.py": 240,
    "tests/loadtest/test_loadtest.py": 180,
    "tests/loadtest/test_bad_events.py": 120,
    "tests/loadtest/test_demo.py": 120,
    "tests/router/lang/test_agreement.py": 90,
    "tests/router/lang/test_functions.py": 60,
    "tests/router/test_backfill.py": 90,
    "tests/router/test_backfill_behind_live.py": 120,
    "tests/router/test_exactly_once.py": 180,
    "tests/router/test_recovery.py": 240,
    "tests/router/test_redrive.py": 120,
    "tests/router/test_router.py": 180,
    "tests/security/test_control.py": 90,
    "tests/stack/test_lifecycle.py": 90,
    "tests/stack/test_spark.py": 90,
    "tests/test_package.py": 90,
}
SESSION = "(the session's fixtures: the stack, shared routers)"
# A test's wait for its turn with the stack (`tests.support.parallel.turn`: behind an exclusive
# test, or the tests an exclusive one waits for), a user property of its reports.
WAITED = "waited_for_turn_s"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--budgets-only-over",
        action="store_true",
        help="print only the test modules over their time budget",
    )


class Clock:
    def __init__(self) -> None:
        self.modules: dict[str, float] = defaultdict(float)
        self.started_apart = 0.0  # session fixtures' setup, inside the current item's setup
        self.waits: dict[str, float] = {}  # each test's wait for its turn with the stack

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef) -> Iterator[None]:
        began = time.monotonic()
        yield
        if fixturedef.scope in ("session", "package"):
            took = time.monotonic() - began
            self.modules[SESSION] += took
            self.started_apart += took

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Iterator[None]:
        began = time.monotonic()
        yield
        if nextitem is None:  # the last: the session's fixtures end with it
            self.started_apart = time.monotonic() - began
            self.modules[SESSION] += self.started_apart

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::")[0]
        took = report.duration
        if report.when == "setup":  # each of a test's reports carries its wait: counted once
            self.waits[report.nodeid] = sum(v for k, v in report.user_properties if k == WAITED)
        if report.when in ("setup", "teardown"):
            took, self.started_apart = max(0.0, took - self.started_apart), 0.0
        self.modules[module] += took

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        only_over = config.getoption("--budgets-only-over")
        rows = sorted(self.modules.items(), key=lambda kv: -kv[1])
        if not rows:
            return
        terminalreporter.section("time per test module, against its budget")
        quick = [m for m, seconds in rows if seconds < QUICK_SECONDS]
        for module, seconds in rows:
            if module in quick:
                continue
            budget = None if module == SESSION else BUDGETS.get(module, DEFAULT_SECONDS)
            over = budget is not None and seconds > budget
            if only_over and not over:
                continue
            said = f"{seconds:8.1f} s" + (f" of {budget:5.0f} s" if budget else " " * 10)
            mark = "  OVER BUDGET" if over else ""
            terminalreporter.write_line(f"{said}  {module}{mark}", red=over)
        if quick and not only_over:
            terminalreporter.write_line(
                f"  and {len(quick)} modules of under {QUICK_SECONDS:.0f} s"
            )
        total = sum(self.modules.values())
        terminalreporter.write_line(f"{total:8.1f} s  in all")
        waited = sum(self.waits.values())
        if waited >= QUICK_SECONDS:
            terminalreporter.write_line(
                f"{waited:8.1f} s  more, tests waiting for their turn with the stack "
                "(behind a test marked exclusive, or one's wait for the others); the longest:"
            )
            longest = sorted(self.waits.items(), key=lambda kv: -kv[1])[:WAITS_SHOWN]
            for nodeid, seconds in longest:
                if seconds >= QUICK_SECONDS:
                    terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Clock(), "keystone-budget-clock")
