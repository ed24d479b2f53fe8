"""The checking mode (syncopate.check): every shipped and example kernel passes it, and it catches
each planted mistake, naming the tile and the chunk.

Planted mistakes are edits of transformed kernels (the goldens of tests/golden/transform/): the
static rules of the transformer refuse these mistakes in annotated sources, so the edits stand
for what those rules cannot see. Each check runs a handful of interpreter launches of a kernel
with a few tiles (seconds in all).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# The interpreter is chosen when triton is first imported: set it before anything imports it.
os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

sy = pytest.importorskip("syncopate")
from syncopate import check  # noqa: E402
from syncopate.kernels import check_problems  # noqa: E402
from syncopate.kernels.examples import cases  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "syncopate" / "kernels" / "examples"
KERNELS = ROOT / "python" / "syncopate" / "kernels"
GOLDEN = ROOT / "tests" / "golden" / "transform"

SHIPPED = [
    ("gemm.py", "gemm_tma_kernel", check_problems.gemm_tma),
    ("gemm.py", "gemm_tma_kernel", check_problems.gemm_tma_pointer_stores),
    ("gemm.py", "gemm_pointer_kernel", check_problems.gemm_pointer),
    ("gemm_reduce.py", "gemm_reduce_kernel", check_problems.gemm_reduce),
    ("gemm_fp8.py", "gemm_fp8_tma_kernel", check_problems.gemm_fp8_tma),
    ("gemm_fp8.py", "gemm_fp8_tma_kernel", check_problems.gemm_fp8_tma_pointer_stores),
    ("moe_gemm.py", "moe_grouped_gemm", check_problems.moe_grouped_gemm),
]


def _case(stem):
    return next(c for c in cases.CASES if c.file == stem + ".py")


@pytest.mark.parametrize("case", cases.CASES, ids=[c.file[:-3] for c in cases.CASES])
def test_every_example_passes(case):
    report = sy.check_kernel(EXAMPLES / case.file, case.kernel, cases.check_problem(case))
    assert report.ok, str(report)
    assert report.runs >= 3 and report.chunks == 2


@pytest.mark.parametrize(
    "file,kernel,problem",
    SHIPPED,
    ids=[
        "gemm_tma",
        "gemm_tma_pointer_stores",
        "gemm_pointer",
        "gemm_reduce",
        "gemm_fp8_tma",
        "gemm_fp8_tma_pointer_stores",
        "moe_grouped_gemm",
    ],
)
def test_every_shipped_kernel_passes(file, kernel, problem):
    report = sy.check_kernel(KERNELS / file, kernel, problem)
    assert report.ok, str(report)


def _planted(stem, edit):
    """The golden transformed kernel of example `stem` with `edit` applied to its text."""
    case = _case(stem)
    text = (GOLDEN / case.file).read_text()
    planted = edit(text)
    assert planted != text, "the edit did not apply"
    original = getattr(cases.load_module(EXAMPLES / case.file, f"sy_check_original_{stem}"), case.kernel)
    return original, check.load_transformed(planted, case.kernel, case.file), cases.check_problem(case)


# The tile's wait as the transformer inserts it: at the tile lookup (`sy_tile =
# syl.wait_for_tile(...)`) or, when a consume is placed after a K loop, at the consume.
WAIT = ("syl.wait_for_tile(", "syl.wait_for_tile_row(", "syl.wait_tile(")


def _move_line(text, pattern, before):
    """Moves the line holding `pattern` (a string or a tuple of them: the first found) to just
    before the first line holding `before`. Moving `sy_tile = syl.wait_for_tile(...)` below a
    read plants a read before the wait: it returns the tile id it is given, so the coordinates
    computed above it stay right."""
    lines = text.splitlines(keepends=True)
    patterns = (pattern,) if isinstance(pattern, str) else pattern
    moving = next(i for i, ln in enumerate(lines) if any(p in ln for p in patterns))
    line = lines.pop(moving)
    target = next(i for i, ln in enumerate(lines) if before in ln)
    indent = re.match(r"\s*", lines[target]).group(0)
    lines.insert(target, indent + line.lstrip())
    return "".join(lines)


def _kinds(report):
    return {f.kind for f in report.findings}


@pytest.mark.parametrize(
    "stem,after",
    [
        ("ag_gemm_one_tile", "c = acc.to("),
        ("ag_gemm_tma", "offs_m = pid_m * BLOCK_M"),
        ("persistent_gemm", "c_ptrs = c_ptr"),
        ("rmsnorm_rows", "w = tl.load(w_ptr"),
    ],
)
def test_a_wait_moved_below_the_reads_is_caught_naming_tile_and_chunk(stem, after):
    original, transformed, problem = _planted(stem, lambda t: _move_line(t, WAIT, after))
    report = check.check_transformed(original, transformed, problem, orders=1)
    assert not report.ok
    late = [f for f in report.findings if f.kind == "read-before-wait"]
    assert late, str(report)
    assert {f.chunk for f in late} == {0, 1}, str(report)  # each chunk, when it is the late one
    first = late[0]
    assert re.search(
        rf"tile {first.tile} \(row \d+, column \d+\) \(position \d+ of the order\) read chunk "
        rf"{first.chunk} \(\w+\[\d+:\d+\]\) before waiting for it \(its own wait landed it\)",
        first.message,
    ), first.message
    assert "read-before-wait" in str(report) or "before waiting" in str(report)


def test_a_missing_wait_is_caught():
    original, transformed, problem = _planted(
        "ag_gemm_one_tile",
        lambda t: "".join(ln for ln in t.splitlines(keepends=True) if not any(w in ln for w in WAIT)),
    )
    report = check.check_transformed(original, transformed, problem, orders=1)
    assert "never-waited" in _kinds(report)
    assert any(f.kind == "read-before-wait" and "it never waited for it" in f.message for f in report.findings), str(
        report
    )


def test_a_read_outside_the_wait_list_is_caught():
    case = _case("ag_gemm_one_tile")
    base = cases.check_problem(case)

    def make(gen):
        p = base(gen)
        # Every tile waits only on chunk 0 (rows 0:40 of a): tiles of rows 40:80 read chunk 1 unannounced.
        p.tile_waits = [[0] for _ in range(p.tiles_m * p.tiles_n)]
        p.tile_notifies = [[] for _ in range(p.tiles_m * p.tiles_n)]
        p.slot_writers = [1, 1]
        p.chunks = [[check.Chunk("a", (slice(0, 40),))], [check.Chunk("a", (slice(40, 80),))]]
        return p

    original = getattr(cases.load_module(EXAMPLES / case.file, "sy_check_original_unlisted"), case.kernel)
    transformed = check.load_transformed((GOLDEN / case.file).read_text(), case.kernel, case.file)
    report = check.check_transformed(original, transformed, make, orders=1)
    unlisted = [f for f in report.findings if f.kind == "unlisted-read"]
    assert unlisted and all(f.chunk == 1 for f in unlisted), str(report)
    assert "not in its wait list" in unlisted[0].message


def test_a_notify_moved_above_the_store_is_caught_naming_tile_and_chunk():
    original, transformed, problem = _planted(
        "gemm_rs_producer", lambda t: _move_line(t, ("syl.notify_tile(", "syl.notify_tile_row("), "tl.store(c_ptr + rm")
    )
    report = check.check_transformed(original, transformed, problem, orders=1)
    early = [f for f in report.findings if f.kind == "notify-before-store"]
    assert early, str(report)
    assert re.search(
        rf"tile {early[0].tile} \(row \d+, column \d+\) \(position \d+ of the order\) notified chunk "
        rf"{early[0].chunk} \(c\[\d+:\d+\]\) before its store: c\[\d+:\d+, \d+:\d+\] not written yet",
        early[0].message,
    ), early[0].message
    assert "chunk-incomplete" in _kinds(report)


def test_a_chunk_announced_before_all_its_tiles_stored_is_caught():
    case = _case("gemm_rs_producer")
    base = cases.check_problem(case)

    def make(gen):
        p = base(gen)
        tiles = p.tiles_m * p.tiles_n
        p.tile_waits = [[] for _ in range(tiles)]
        p.tile_notifies = [[0] for _ in range(tiles)]  # one chunk: all of c
        p.slot_writers = [tiles - 1]  # one notify short: completes too early
        p.chunks = [[check.Chunk("c", (slice(None),))]]
        return p

    original = getattr(cases.load_module(EXAMPLES / case.file, "sy_check_original_early"), case.kernel)
    transformed = check.load_transformed((GOLDEN / case.file).read_text(), case.kernel, case.file)
    report = check.check_transformed(original, transformed, make, orders=1)
    assert {"chunk-incomplete", "notify-count"} <= _kinds(report), str(report)
    assert any("was raised 12 times, expected 11" in f.message for f in report.findings), str(report)


def test_an_epilogue_that_recomputes_the_tile_is_caught():
    recompute = (
        "        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)\n"
        "        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n"
        "        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n"
    )
    original, transformed, problem = _planted(
        "persistent_gemm", lambda t: t.replace("        c_ptrs = c_ptr", recompute + "        c_ptrs = c_ptr", 1)
    )
    report = check.check_transformed(original, transformed, problem, orders=1)
    assert _kinds(report) & {"wrong-result", "unwritten"}, str(report)


def test_report_text_and_raise():
    original, transformed, problem = _planted("rmsnorm_rows", lambda t: _move_line(t, WAIT, "w = tl.load(w_ptr"))
    report = check.check_transformed(original, transformed, problem, orders=1)
    text = str(report)
    assert text.startswith("FAILED: rmsnorm_kernel: ")
    with pytest.raises(sy.UserError, match="read chunk"):
        report.raise_if_failed()


def test_a_kernel_not_loaded_for_checking_is_refused():
    case = _case("rmsnorm_rows")
    golden = cases.load_module(GOLDEN / case.file, "sy_check_golden_plain")
    original = getattr(cases.load_module(EXAMPLES / case.file, "sy_check_original_plain"), case.kernel)
    with pytest.raises(sy.UserError, match="does not call syncopate._check_sites"):
        check.check_transformed(original, getattr(golden, case.kernel), cases.check_problem(case))


def test_command_line_checks_several_kernels(tmp_path, capsys):
    problems = tmp_path / "problems.py"
    problems.write_text(
        "from syncopate.kernels import check_problems as cp\n"
        "def tma(gen):\n    return cp.gemm_tma(gen)\n"
        "def pointer(gen):\n    return cp.gemm_pointer(gen)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncopate.check",
            str(KERNELS / "gemm.py"),
            "--kernel",
            "gemm_tma_kernel,gemm_pointer_kernel",
            "--problem",
            f"{problems}:tma",
            "--problem",
            f"{problems}:pointer",
            "--orders",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.count("ok: ") == 2, done.stdout
    assert (
        check.main([str(KERNELS / "gemm.py"), "--kernel", "gemm_tma_kernel", "--problem", f"{problems}:nothing"]) == 2
    )
    assert "has no function 'nothing'" in capsys.readouterr().err
