"""order_plugin.py, the guard scripts/test.sh relies on: --test-order reverses or shuffles (with a
printed, repeatable seed) and --outcomes-compare fails a run whose outcomes differ from a run in
another order, even where no test fails (a skip that depends on order). Each case runs pytest in
a child process on a tiny suite of its own."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# test_b depends on test_a having run first: it skips (not fails) otherwise, so only the
# comparison of outcomes can tell.
SUITE = {
    "test_first.py": """
import pytest
STATE = []

def test_a():
    STATE.append("a")

def test_b():
    if STATE != ["a"]:
        pytest.skip("test_a has not run")

def test_c():
    pass
""",
    "test_second.py": """
def test_d():
    pass

def test_e():
    pass
""",
}


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def pytest_in(directory, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "order_plugin", "-p", "no:cacheprovider", "-v", "-rs", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ran(run):
    """The test names in the order they ran (from -v's result lines)."""
    return re.findall(r"^\S+::(\S+) (?:PASSED|FAILED|SKIPPED|ERROR)", run.stdout, re.MULTILINE)


def test_file_order_then_reverse_with_a_skip_that_depends_on_order(suite):
    first = pytest_in(suite, "--outcomes-out", "first.json")
    assert first.returncode == 0, first.stdout
    assert "test order: file" in first.stdout
    assert ran(first) == ["test_a", "test_b", "test_c", "test_d", "test_e"]
    recorded = json.loads((suite / "first.json").read_text())
    assert recorded == {
        f"test_{m}.py::test_{t}": "passed" for m, ts in (("first", "abc"), ("second", "de")) for t in ts
    }

    again = pytest_in(suite, "--test-order", "reverse", "--outcomes-compare", "first.json")
    assert ran(again) == ["test_e", "test_d", "test_c", "test_b", "test_a"]
    assert "failed" not in again.stdout.splitlines()[-1]  # no test failed ...
    assert again.returncode == 1, again.stdout  # ... but an outcome differs
    assert "outcomes that depend on test order (1)" in again.stdout
    assert "passed       skipped  test_first.py::test_b" in again.stdout


def test_same_outcomes_in_both_orders_pass(suite):
    (suite / "test_first.py").write_text(SUITE["test_first.py"].replace('pytest.skip("test_a has not run")', "pass"))
    assert pytest_in(suite, "--outcomes-out", "first.json").returncode == 0
    again = pytest_in(suite, "--test-order", "reverse", "--outcomes-compare", "first.json")
    assert again.returncode == 0, again.stdout
    assert "every outcome in order reverse equals the recorded run's" in again.stdout


def compare_files(directory, first, second):
    return subprocess.run(
        [sys.executable, str(HERE / "order_plugin.py"), first, second],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_two_runs_side_by_side_compared_afterwards(suite):
    # scripts/test.sh runs both orders at once, each writing its outcomes, and compares them after.
    assert pytest_in(suite, "--outcomes-out", "first.json").returncode == 0
    assert pytest_in(suite, "--test-order", "reverse", "--outcomes-out", "reversed.json").returncode == 0
    differ = compare_files(suite, "first.json", "reversed.json")
    assert differ.returncode == 1, differ.stdout
    assert "outcomes that depend on test order (1)" in differ.stdout
    assert "passed       skipped  test_first.py::test_b" in differ.stdout

    (suite / "test_first.py").write_text(SUITE["test_first.py"].replace('pytest.skip("test_a has not run")', "pass"))
    assert pytest_in(suite, "--outcomes-out", "first.json").returncode == 0
    assert pytest_in(suite, "--test-order", "reverse", "--outcomes-out", "reversed.json").returncode == 0
    same = compare_files(suite, "first.json", "reversed.json")
    assert same.returncode == 0, same.stdout
    assert "all 5 outcomes are the same in both runs" in same.stdout


def test_random_order_prints_its_seed_and_repeats_with_it(suite):
    drawn = pytest_in(suite, "--test-order", "random")
    seed = re.search(r"^test order: random:(\d+) \(again: --test-order random:\1\)$", drawn.stdout, re.MULTILINE)
    assert seed, drawn.stdout
    assert drawn.stdout.count(seed[0]) == 2  # in the header and again in the summary (-q hides the header)
    repeat = pytest_in(suite, "--test-order", f"random:{seed[1]}")
    assert ran(repeat) == ran(drawn)
    # Modules stay together: a module's tests never interleave with another's.
    names = ran(repeat)
    modules = ["first" if n in ("test_a", "test_b", "test_c") else "second" for n in names]
    assert modules == sorted(modules, key=modules.index)
    assert sorted(names) == ["test_a", "test_b", "test_c", "test_d", "test_e"]


def test_a_bad_order_is_a_usage_error(suite):
    for bad in ("sideways", "reverse:3", "random:x"):
        run = pytest_in(suite, "--test-order", bad)
        assert run.returncode == 4, (bad, run.stdout, run.stderr)
        assert "--test-order" in run.stderr
