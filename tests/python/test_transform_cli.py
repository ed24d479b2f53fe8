"""`syncopate transform` from the command line, and the golden outputs as Python.

The CLI is found through the SYNCOPATE_CLI environment variable, else as build*/src/cli/syncopate
under the repository root. The golden files must compile as Python whether or not a CLI exists.
"""

import json
import os
import py_compile
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "syncopate" / "kernels" / "examples"
GOLDEN = ROOT / "tests" / "golden" / "transform"


def _cases():
    out = []
    for line in (GOLDEN / "cases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            file, kernel = line.split()
            out.append((file, kernel))
    return out


def _find_cli():
    env = os.environ.get("SYNCOPATE_CLI")
    if env:
        return Path(env)
    found = sorted(ROOT.glob("build*/src/cli/syncopate"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


@pytest.fixture(scope="module")
def cli():
    path = _find_cli()
    if path is None or not path.exists():
        pytest.skip("no syncopate CLI: build it (cmake, ninja syncopate_cli) or set SYNCOPATE_CLI")
    return path


def _run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_cases_cover_the_four_kinds():
    files = [f for f, _ in _cases()]
    assert len(files) >= 4
    for file in files:
        assert (EXAMPLES / file).is_file()
        assert (GOLDEN / file).is_file()


@pytest.mark.parametrize("file", [f for f, _ in _cases()])
def test_golden_compiles_as_python(file, tmp_path):
    py_compile.compile(str(GOLDEN / file), cfile=str(tmp_path / (file + "c")), doraise=True)
    text = (GOLDEN / file).read_text()
    assert "import syncopate.language_sites as syl  # [syncopate]" in text
    assert "syl.tile_at(sy_tile_order" in text


@pytest.mark.parametrize("file,kernel", _cases())
def test_cli_output_matches_golden(cli, file, kernel, tmp_path):
    out = tmp_path / file
    result = _run(cli, "transform", EXAMPLES / file, "--kernel", kernel, "-o", out,
                  "--describe", tmp_path / "describe.json")
    assert result.returncode == 0, result.stderr
    # The CLI names the input by the path it was given; the golden was made from the same path
    # form by scripts/regen_golden_transform.sh, and file names do not appear in the output.
    assert out.read_text() == (GOLDEN / file).read_text()
    described = json.loads((tmp_path / "describe.json").read_text())
    assert described["kernel"] == kernel
    assert [p["name"] for p in described["added_params"]][0] == "sy_signals"
    assert described["accesses"], "every example consumes or produces a tensor"


def test_cli_error_names_file_line_and_rule(cli, tmp_path):
    src = tmp_path / "bad.py"
    src.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n"
                   "def k(x_ptr):\n"
                   "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                   "    pid_m = tl.program_id(0)\n"
                   "    # @sy.end\n"
                   "    # @sy.consume(y_ptr, m=pid_m)\n"
                   "    x = tl.load(x_ptr)\n")
    result = _run(cli, "transform", src, "--kernel", "k", "-o", tmp_path / "out.py")
    assert result.returncode == 1
    assert f"error: {src}:9:19: @sy.consume(y_ptr, m=pid_m): 'y_ptr' is not a parameter of kernel 'k'" \
        in result.stderr
    assert not (tmp_path / "out.py").exists()


def test_cli_unknown_kernel(cli):
    result = _run(cli, "transform", EXAMPLES / "rmsnorm_rows.py", "--kernel", "nope")
    assert result.returncode == 1
    assert "kernel 'nope': no function of that name in the file (@triton.jit functions: rmsnorm_kernel)" \
        in result.stderr


def test_cli_missing_input_file(cli, tmp_path):
    result = _run(cli, "transform", tmp_path / "absent.py", "--kernel", "k")
    assert result.returncode == 1
    assert "absent.py: cannot open the kernel file for reading" in result.stderr


def test_cli_checks_tensors_against_a_plan(cli, tmp_path):
    plan = {
        "version": 1,
        "collective": {"kind": "custom", "tensor": "a"},
        "world_size": 1,
        "tensors": {"a": {"shape": [64, 32], "dtype": "f32"}},
        "ranks": [{"rank": 0, "streams": []}],
        "chunks": [],
    }
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    ok = _run(cli, "transform", EXAMPLES / "ag_gemm_one_tile.py", "--kernel", "matmul_kernel",
              "--plan", plan_path, "-o", tmp_path / "ok.py")
    assert ok.returncode == 0, ok.stderr
    bad = _run(cli, "transform", EXAMPLES / "rmsnorm_rows.py", "--kernel", "rmsnorm_kernel",
               "--plan", plan_path)
    assert bad.returncode == 1
    assert "tensor 'x' is not in the plan (tensors: a); name it with tensor=" in bad.stderr
