"""pytest plugin: run the tests in another order, record each test's outcome, and compare the
outcomes with those of a run in another order.

    pytest --test-order reverse|random[:SEED]     (default: file order)
    pytest --outcomes-out first.json              then
    pytest --test-order reverse --outcomes-compare first.json
    or, for two runs side by side (each with --outcomes-out):
    python order_plugin.py first.json reversed.json   (exit 1 and a list if any outcome differs)

scripts/test.sh runs the suite in file order and reversed, side by side, each with a fresh Triton cache:
between them every pair of test modules runs in both orders, so a test that passes in one and
fails or skips in the other depends on what an earlier test left behind (issue 13: an interpreter
run left triton.language patched, and a later in-process compile for sm_90 failed). The comparison
fails if any outcome differs, and lists those tests. Loaded by conftest.py (or `-p order_plugin`
with this directory on the path).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("syncopate test order")
    group.addoption(
        "--test-order",
        default="file",
        metavar="ORDER",
        help="file (default), reverse, or random[:SEED] (modules shuffled, then the tests "
        "in each module; the seed is printed in the header and the summary)",
    )
    group.addoption(
        "--outcomes-out", metavar="PATH", help="write {test id: passed|failed|skipped|...} as JSON to PATH at the end"
    )
    group.addoption(
        "--outcomes-compare",
        metavar="PATH",
        help="fail the run if any test's outcome differs from the one recorded in PATH "
        "(by --outcomes-out in a run with another order)",
    )


class OrderOption:
    """--test-order: file, reverse, or random with a seed (given, or drawn and printed)."""

    def __init__(self, option: str):
        self.name, _, seed = option.partition(":")
        if self.name not in ("file", "reverse", "random") or (seed and self.name != "random"):
            raise pytest.UsageError(f"--test-order: expected file, reverse or random[:SEED], got {option!r}")
        self.seed = None
        if self.name == "random":
            try:
                self.seed = int(seed) if seed else random.SystemRandom().randrange(10**6)
            except ValueError:
                raise pytest.UsageError(f"--test-order: SEED must be an integer, got {seed!r}") from None

    def __str__(self):
        return self.name if self.seed is None else f"{self.name}:{self.seed}"

    def describe(self):
        return f"test order: {self}" + (f" (again: --test-order {self})" if self.seed is not None else "")

    def pytest_report_header(self):
        return self.describe()

    def pytest_terminal_summary(self, terminalreporter):
        if self.name != "file":  # also under -q, which hides the header
            terminalreporter.write_line(self.describe())

    @pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
    def pytest_collection_modifyitems(self, items):
        if self.name == "reverse":
            # Reversing the whole list keeps each module's tests together (module fixtures set up once).
            items.reverse()
        elif self.name == "random":
            rng = random.Random(self.seed)
            by_module: dict[str, list] = {}
            for item in items:
                by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
            modules = list(by_module.values())
            rng.shuffle(modules)
            for tests in modules:
                rng.shuffle(tests)
            items[:] = [item for tests in modules for item in tests]


def outcome_differences(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str, str]]:
    """(test, outcome before, outcome after) for every test whose outcome is not the same in both."""
    return [
        (t, before.get(t, "not run"), after.get(t, "not run"))
        for t in sorted(set(before) | set(after))
        if before.get(t) != after.get(t)
    ]


class OutcomeRecord:
    """Each test's outcome (passed, skipped, xfailed, xpassed, failed, error: the worst of its
    phases), written with --outcomes-out and compared with --outcomes-compare."""

    RANK = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 1, "failed": 2, "error": 3}

    def __init__(self, config, order: OrderOption):
        self.config = config
        self.order = order
        self.outcomes: dict[str, str] = {}
        self.differences: list[tuple[str, str, str]] | None = None

    def pytest_runtest_logreport(self, report):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.failed and report.when != "call":
            outcome = "error"
        elif report.passed and report.when != "call":
            return  # a setup or teardown that passed says nothing about the test
        previous = self.outcomes.get(report.nodeid)
        if previous is None or self.RANK[outcome] > self.RANK[previous]:
            self.outcomes[report.nodeid] = outcome

    def pytest_sessionfinish(self, session):
        out = self.config.getoption("--outcomes-out")
        if out:
            Path(out).write_text(json.dumps(self.outcomes, indent=1, sort_keys=True) + "\n")
        recorded = self.config.getoption("--outcomes-compare")
        if recorded:
            self.differences = outcome_differences(json.loads(Path(recorded).read_text()), self.outcomes)
            if self.differences and session.exitstatus == 0:
                session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter):
        if self.differences is None:
            return
        this_order = str(self.order)
        if not self.differences:
            terminalreporter.write_line(f"test order: every outcome in order {this_order} equals the recorded run's")
            return
        terminalreporter.section(f"outcomes that depend on test order ({len(self.differences)})", red=True)
        terminalreporter.write_line(f"{'recorded run':>12}  {this_order:>12}  test")
        for test, recorded, now in self.differences:
            terminalreporter.write_line(f"{recorded:>12}  {now:>12}  {test}")


def pytest_configure(config):
    order = OrderOption(config.getoption("--test-order"))
    config.pluginmanager.register(order, "syncopate-test-order")
    config.pluginmanager.register(OutcomeRecord(config, order), "syncopate-outcome-record")


def main(argv: list[str]) -> int:
    """Compares two runs' --outcomes-out files; 1 (and the list) if any outcome differs."""
    if len(argv) != 2:
        print("usage: order_plugin.py FIRST.json SECOND.json")
        return 2
    first, second = (json.loads(Path(a).read_text()) for a in argv)
    differences = outcome_differences(first, second)
    if not differences:
        print(f"test order: all {len(first)} outcomes are the same in both runs")
        return 0
    print(f"outcomes that depend on test order ({len(differences)}):")
    print(f"{'first run':>12}  {'second run':>12}  test")
    for test, before, after in differences:
        print(f"{before:>12}  {after:>12}  {test}")
    return 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
