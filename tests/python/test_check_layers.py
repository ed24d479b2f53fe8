"""scripts/check_layers.py: the layering check that scripts/test.sh runs holds on this tree and
fails, naming the file and the edge, on an upward include or a missing link."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def copy_tree(tmp_path):
    for part in ("src", "include"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return tmp_path


def test_the_repository_holds_its_layering():
    done = run(ROOT)
    assert done.returncode == 0, done.stdout
    assert "layering holds" in done.stdout


def test_an_upward_include_is_named(tmp_path):
    root = copy_tree(tmp_path)
    json_cpp = root / "src" / "plan" / "json.cpp"
    json_cpp.write_text('#include "syncopate/sim/simulator.hpp"\n' + json_cpp.read_text())
    done = run(root)
    assert done.returncode == 1
    assert "src/plan/json.cpp:1: plan includes sim: not an allowed edge" in done.stdout


def test_an_include_of_a_layer_not_linked_is_named(tmp_path):
    root = copy_tree(tmp_path)
    cmake = root / "src" / "transform" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("PUBLIC syncopate_lower", "PUBLIC syncopate_plan"))
    done = run(root)
    assert done.returncode == 1
    assert "transform includes lower but its CMake targets do not link it" in done.stdout
