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
        assert (GOLDEN / Path(file).name).is_file()  # "../attention.py": golden named by file name


@pytest.mark.parametrize("file", [f for f, _ in _cases()])
def test_golden_compiles_as_python(file, tmp_path):
    golden = GOLDEN / Path(file).name
    py_compile.compile(str(golden), cfile=str(tmp_path / (golden.name + "c")), doraise=True)
    text = golden.read_text()
    assert "import syncopate.language as syl  # [syncopate]" in text
    assert "syl.tile_at(sy_tile_order" in text or "syl.tile_at_or(sy_tile_order" in text


@pytest.mark.parametrize("file,kernel", _cases())
def test_cli_output_matches_golden(cli, file, kernel, tmp_path):
    out = tmp_path / Path(file).name
    result = _run(
        cli, "transform", EXAMPLES / file, "--kernel", kernel, "-o", out, "--describe", tmp_path / "describe.json"
    )
    assert result.returncode == 0, result.stderr
    # The CLI names the input by the path it was given; the golden was made from the same path
    # form by scripts/regen_golden_transform.sh, and file names do not appear in the output.
    assert out.read_text() == (GOLDEN / Path(file).name).read_text()
    described = json.loads((tmp_path / "describe.json").read_text())
    assert described["kernel"] == kernel
    assert [p["name"] for p in described["added_params"]][0] == "sy_signals"
    assert described["accesses"], "every example consumes or produces a tensor"


def test_cli_error_names_file_line_and_rule(cli, tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def k(x_ptr):\n"
        "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
        "    pid_m = tl.program_id(0)\n"
        "    # @sy.end\n"
        "    # @sy.consume(y_ptr, m=pid_m)\n"
        "    x = tl.load(x_ptr)\n"
    )
    result = _run(cli, "transform", src, "--kernel", "k", "-o", tmp_path / "out.py")
    assert result.returncode == 1
    assert f"error: {src}:9:19: @sy.consume(y_ptr, m=pid_m): 'y_ptr' is not a parameter of kernel 'k'" in result.stderr
    assert not (tmp_path / "out.py").exists()


def test_cli_unknown_kernel(cli):
    result = _run(cli, "transform", EXAMPLES / "rmsnorm_rows.py", "--kernel", "nope")
    assert result.returncode == 1
    assert (
        "kernel 'nope': no function of that name in the file (@triton.jit functions: rmsnorm_kernel)" in result.stderr
    )


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
    ok = _run(
        cli,
        "transform",
        EXAMPLES / "ag_gemm_one_tile.py",
        "--kernel",
        "matmul_kernel",
        "--plan",
        plan_path,
        "-o",
        tmp_path / "ok.py",
    )
    assert ok.returncode == 0, ok.stderr
    bad = _run(cli, "transform", EXAMPLES / "rmsnorm_rows.py", "--kernel", "rmsnorm_kernel", "--plan", plan_path)
    assert bad.returncode == 1
    assert "tensor 'x' is not in the plan (tensors: a); name it with tensor=" in bad.stderr


_TWO_KERNELS = '''import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # @sy.tile(index=tl.program_id(0), m=row)
    row = tl.program_id(0)
    # @sy.end
    offs = row * BLOCK + tl.arange(0, BLOCK)
    # @sy.consume(x_ptr, m=row)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)


@triton.jit
def shift(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # @sy.tile(index=tl.program_id(0), m=row)
    row = tl.program_id(0)
    # @sy.end
    offs = row * BLOCK + tl.arange(0, BLOCK)
    # @sy.produce(y_ptr, m=row)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)
'''


def test_cli_transforms_several_kernels_into_one_file(cli, tmp_path):
    src = tmp_path / "two.py"
    src.write_text(_TWO_KERNELS)
    comma, repeated = tmp_path / "comma.py", tmp_path / "repeated.py"
    described = tmp_path / "d.json"
    r = _run(cli, "transform", src, "--kernel", "scale,shift", "-o", comma, "--describe", described)
    assert r.returncode == 0, r.stderr
    r = _run(cli, "transform", src, "--kernel", "scale", "--kernel", "shift", "-o", repeated)
    assert r.returncode == 0, r.stderr
    text = comma.read_text()
    assert text == repeated.read_text()
    assert text.count("import syncopate.language as syl  # [syncopate]") == 1
    assert text.count("sy_signals, sy_tile_order,") == 2
    assert '__syncopate__ = {"version": 2, "kernels": {"scale": {' in text
    assert (
        text.count("syl.wait_for_tile(") + text.count("syl.wait_for_tile_row(") + text.count("syl.wait_tile(") == 1
        and text.count("syl.notify_tile(") + text.count("syl.notify_tile_row(") == 1
    )
    py_compile.compile(str(comma), cfile=str(tmp_path / "comma.pyc"), doraise=True)
    d = json.loads(described.read_text())
    assert [k["kernel"] for k in d] == ["scale", "shift"]
    assert [a["role"] for k in d for a in k["accesses"]] == ["consume", "produce"]
    bad = _run(cli, "transform", src, "--kernel", "scale,nope")
    assert bad.returncode == 1 and "kernel 'nope': no function of that name" in bad.stderr


def test_cli_plan_names_its_tensor_for_the_annotations(cli, tmp_path):
    plan = tmp_path / "plan.json"
    r = _run(cli, "plan", "--collective", "all-gather", "--world", "2", "--shape", "64x32", "--tensor", "x", "-o", plan)
    assert r.returncode == 0, r.stderr
    assert json.loads(plan.read_text())["collective"]["tensor"] == "x"
    src = tmp_path / "two.py"
    src.write_text(_TWO_KERNELS)
    # x_ptr names tensor 'x' of the plan; y (the producer's) is not in it.
    assert _run(cli, "transform", src, "--kernel", "scale", "--plan", plan).returncode == 0
    r = _run(cli, "transform", src, "--kernel", "shift", "--plan", plan)
    assert r.returncode == 1 and "tensor 'y' is not in the plan (tensors: x)" in r.stderr
    a2a = tmp_path / "a2a.json"
    r = _run(
        cli,
        "plan",
        "--collective",
        "all-to-all",
        "--world",
        "2",
        "--shape",
        "64x32",
        "--tensor",
        "tokens",
        "--output-tensor",
        "routed",
        "-o",
        a2a,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(a2a.read_text())["tensors"]) == ["routed", "tokens"]


_CHECK_PROBLEMS = '''import torch
from syncopate.check import CheckProblem


def rows(gen):
    x = torch.randn(64, generator=gen)
    y = torch.empty(64)
    return CheckProblem({"x": x, "y": y}, (x, y), dict(BLOCK=16), (4,), None, 4, 1, 16, outputs=("y",))
'''


def test_cli_check_runs_the_checking_mode(cli, tmp_path):
    import sys

    src = tmp_path / "two.py"
    src.write_text(_TWO_KERNELS)
    # The same kernel reading the next block of rows: its wait list (its own rows) misses them.
    shifted = tmp_path / "shifted.py"
    shifted.write_text(_TWO_KERNELS.replace("tl.load(x_ptr + offs) * 2", "tl.load(x_ptr + (offs + BLOCK) % 64) * 2"))
    problems = tmp_path / "problems.py"
    problems.write_text(_CHECK_PROBLEMS)
    env = dict(os.environ, SYNCOPATE_PYTHON=sys.executable, TRITON_INTERPRET="1")
    ok = subprocess.run(
        [
            str(cli),
            "transform",
            str(src),
            "--kernel",
            "scale",
            "-o",
            str(tmp_path / "o.py"),
            "--check",
            f"{problems}:rows",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert "ok: scale:" in ok.stdout
    bad = subprocess.run(
        [
            str(cli),
            "transform",
            str(shifted),
            "--kernel",
            "scale",
            "-o",
            str(tmp_path / "s.py"),
            "--check",
            f"{problems}:rows",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 1, bad.stderr + bad.stdout
    assert "FAILED: scale:" in bad.stdout and "which is not in its wait list" in bad.stdout
