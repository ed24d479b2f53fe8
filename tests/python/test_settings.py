"""syncopate.settings: every environment variable is read in one place per language, typed, and
listed in docs/PYTHON.md's "Settings" table."""

import re
from pathlib import Path

import pytest

from syncopate.errors import UserError
from syncopate.settings import SETTINGS, Env, env

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "syncopate"
CPP_SETTINGS = ROOT / "include" / "syncopate" / "common" / "settings.hpp"
# Reads of the environment: any use of os.environ or os.getenv but a write (`os.environ[key] =
# value`, `os.environ.setdefault(...)`) or a copy for a child process (`dict(os.environ, ...)`);
# so an alias (`environ = os.environ`) counts too.
ENV_READ = re.compile(r"os\.getenv\(|(?<!dict\()os\.environ\b(?!\[[^\]]+\]\s*=)(?!\.setdefault\()")


def cpp_variables():
    return set(re.findall(r'read\("(\w+)"\)', CPP_SETTINGS.read_text()))


def documented_variables():
    text = (ROOT / "docs" / "PYTHON.md").read_text()
    section = text.split("## Settings\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", section, re.M)}


def test_the_docs_table_lists_every_variable_and_no_other():
    assert documented_variables() == {s.name for s in SETTINGS} | cpp_variables()


def test_no_python_module_but_settings_reads_the_environment():
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "settings.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ENV_READ.search(line):
                readers.append(f"{rel}:{number}: {line.strip()}")
    assert readers == []


def test_no_cpp_file_but_settings_hpp_calls_getenv():
    callers = [
        f"{path.relative_to(ROOT)}:{number}"
        for base in (ROOT / "src", ROOT / "include", ROOT / "python" / "bindings")
        for path in sorted(base.rglob("*"))
        if path.suffix in (".cpp", ".hpp", ".cu", ".h") and path != CPP_SETTINGS
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if "getenv" in line
    ]
    assert callers == []


def test_values_are_read_when_the_attribute_is_read(monkeypatch):
    monkeypatch.delenv("SYNCOPATE_BACKEND", raising=False)
    assert env.backend == "auto"
    monkeypatch.setenv("SYNCOPATE_BACKEND", "sm-copy")
    assert env.backend == "sm-copy"
    monkeypatch.delenv("SYNCOPATE_CALIBRATION", raising=False)
    assert env.calibration is None


@pytest.mark.parametrize("text, value", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_flags(monkeypatch, text, value):
    if text is None:
        monkeypatch.delenv("SYNCOPATE_AUTO_STAGED", raising=False)
    else:
        monkeypatch.setenv("SYNCOPATE_AUTO_STAGED", text)
    assert env.auto_staged is value


def test_a_bad_number_names_the_variable(monkeypatch):
    monkeypatch.setenv("SYNCOPATE_WAIT_BOUND_MS", "ten")
    with pytest.raises(UserError, match=r"\$SYNCOPATE_WAIT_BOUND_MS='ten': expected a whole number"):
        env.wait_bound_ms
    monkeypatch.setenv("SYNCOPATE_WAIT_BOUND_MS", "250")
    assert env.wait_bound_ms == 250
    assert Env.wait_bound_ms.name == "SYNCOPATE_WAIT_BOUND_MS"
