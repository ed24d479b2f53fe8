"""The transformer through the bindings: the shipped example kernels give the golden outputs,
the description matches the source, and bad kernels raise TransformError naming file:line:col."""

import json
from pathlib import Path

import pytest

import syncopate as sy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "syncopate" / "kernels" / "examples"
GOLDEN = ROOT / "tests" / "golden" / "transform"


def golden_cases():
    lines = (GOLDEN / "cases.txt").read_text().splitlines()
    return [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("example,kernel", golden_cases())
def test_examples_match_goldens(example, kernel):
    source = (EXAMPLES / example).read_text()
    result = sy.transform(source, str(EXAMPLES / example), kernel)  # the real path: imports resolve beside it
    assert result.source == (GOLDEN / Path(example).name).read_text()  # "../attention.py": by file name
    assert result.kernel_name == kernel
    assert result.tile_blocks >= 1


@pytest.mark.parametrize("example,kernel", golden_cases())
def test_only_marked_lines_are_new(example, kernel):
    source = (EXAMPLES / example).read_text()
    result = sy.transform(source, str(EXAMPLES / example), kernel)  # the real path: imports resolve beside it
    original = set(source.splitlines())
    mark = sy._core.TRANSFORM_INSERTED_MARK
    replaced = [line for line in result.source.splitlines() if line.strip().startswith(mark + " was: ")]
    for line in replaced:  # a replaced line is kept, commented out, word for word
        assert line.replace(mark + " was: ", "", 1) in original, line
    unmarked = [line for line in result.source.splitlines() if line not in original and mark not in line]
    # The exceptions: the signature's last line gives its closing "):" to a line of its own,
    # after the appended parameters; a signature line holding a parameter with a default is split
    # at its commas, so that the appended parameters (which have none) come before it.
    for line in unmarked:
        closed_here = line.rstrip().endswith(",") and line.rstrip()[:-1] + "):" in original
        piece = line.strip().rstrip(",")
        split_here = bool(piece) and any(piece in o and o.strip() != line.strip() for o in original)
        assert closed_here or split_here or line.strip() == "):", line
    assert len(unmarked) <= 2, unmarked


@pytest.mark.parametrize("example,kernel", golden_cases())
def test_description_agrees_with_the_source(example, kernel):
    source = (EXAMPLES / example).read_text()
    result = sy.transform(source, str(EXAMPLES / example), kernel)  # the real path: imports resolve beside it
    lines = source.splitlines()
    base = [p.name for p in sy.added_params()]
    block = ["sy_blocks", "sy_block_wait_offsets", "sy_block_wait_slots", "sy_block_first", "sy_block_waits"]
    per_block = any(a.per_block for a in result.accesses)  # @sy.consume_block adds the block tables
    assert [p.name for p in result.added_params] == base + (block if per_block else [])
    assert all(p.name.startswith("sy_") and p.type and p.meaning for p in result.added_params)
    for p in result.kernel_params:
        assert p in source
    assert result.accesses, "every example consumes or produces a communicated tensor"
    for annotated in result.accesses:
        annotation = lines[annotated.line - 1]
        assert "@sy." in annotation and annotated.param in annotation
        assert annotated.param in result.kernel_params
        assert annotated.access.role in ("consume", "produce")
    described = json.loads(result.describe_json())
    assert json.dumps(described).count(kernel) >= 1


def test_plan_check_of_annotated_tensors():
    source = (EXAMPLES / "ag_gemm_one_tile.py").read_text()
    result = sy.transform(source, "ag_gemm_one_tile.py", "matmul_kernel")
    tensor = result.accesses[0].access.tensor
    good = sy.make_plan("all-gather", world_size=2, shape=[64, 32], tensor=tensor)
    assert sy.transform(source, "ag_gemm_one_tile.py", "matmul_kernel", plan=good).source == result.source
    other = sy.make_plan("all-gather", world_size=2, shape=[64, 32], tensor="not_" + tensor)
    with pytest.raises(sy.TransformError, match=r"ag_gemm_one_tile\.py:\d+:\d+: "):
        sy.transform(source, "ag_gemm_one_tile.py", "matmul_kernel", plan=other)


def test_unknown_kernel():
    source = (EXAMPLES / "rmsnorm_rows.py").read_text()
    with pytest.raises(sy.TransformError, match=r"mine\.py:\d+:\d+: .*'no_such_kernel'"):
        sy.transform(source, "mine.py", "no_such_kernel")


def test_unterminated_string_names_line():
    source = 'import triton\n\n@triton.jit\ndef k(x_ptr):\n    s = "abc\n'
    with pytest.raises(sy.TransformError, match=r"bad\.py:5:\d+: ") as info:
        sy.transform(source, "bad.py", "k")
    assert isinstance(info.value, ValueError)


_HELPERS = """import triton
import triton.language as tl


@triton.jit
def store_rows(y_ptr, rows, value):
    tl.store(y_ptr + rows, value)
"""

_KERNEL = """import triton
import triton.language as tl
from mylib_helpers import store_rows


@triton.jit
def k(x_ptr, y_ptr, BM: tl.constexpr):
    # @sy.tile(index=tl.program_id(0), m=pid_m)
    pid_m = tl.program_id(0)
    # @sy.end
    rows = pid_m * BM + tl.arange(0, BM)
    # @sy.consume(x_ptr, m=pid_m)
    x = tl.load(x_ptr + rows)
    # @sy.produce(y_ptr, m=pid_m)
    store_rows(y_ptr, rows, x)
"""


def test_imported_helpers_are_found_on_module_paths_defaulting_to_sys_path(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "mylib_helpers.py").write_text(_HELPERS)
    (tmp_path / "kernels").mkdir()
    kernel = tmp_path / "kernels" / "k.py"
    kernel.write_text(_KERNEL)
    # The produce marks the imported helper's call: its store is read from lib/mylib_helpers.py.
    out = sy.transform(_KERNEL, str(kernel), "k", module_paths=[str(tmp_path / "lib")]).source
    lines = [ln.strip() for ln in out.splitlines()]
    call = lines.index("store_rows(y_ptr, rows, x)")
    assert lines[call + 1].startswith(("syl.notify_tile(", "syl.notify_tile_row(")), out
    # Not on the paths given: refused at the import, naming what was looked for.
    with pytest.raises(
        sy.TransformError, match=r"k\.py:3:1: from mylib_helpers import store_rows: cannot find"
    ) as info:
        sy.transform(_KERNEL, str(kernel), "k", module_paths=[])
    assert "mylib_helpers.py" in str(info.value)
    # By default the binding searches Python's own path.
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    assert sy.transform(_KERNEL, str(kernel), "k").source == out
