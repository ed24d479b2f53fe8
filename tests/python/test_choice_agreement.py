"""One decision: `syncopate tune` (the CLI) and the op contexts' mode="auto" choice
(ops.choice.choose, called as AgGemm / GemmRs / GemmAr call it) agree on every shape of a
table: decision, backend, algorithm, split, tile order, reduction and reason. Both ask the C++
tune (include/syncopate/sim/autotune.hpp); the ops leave kernel-level overlap out
(--no-kernel-level), since they run fused or sequential only.

The CLI is found through SYNCOPATE_CLI, else as build*/src/cli/syncopate under the repository root.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

import syncopate as sy
from syncopate.ops import choice as choice_mod

ROOT = Path(__file__).resolve().parents[2]
CALIB = ROOT / "calib" / "h200.json"

# (collective, M, N, K, world, tile, reduce): M is the GEMM's rows (all-gather: gathered; GEMM+RS/AR:
# reduced), from 128 to 16384, worlds 1 to 8, reduce-add chunks and the staged plans.
SHAPES = [
    ("all-gather", 128, 4096, 4096, 2, (128, 256), "chunks"),
    ("all-gather", 1024, 8192, 8192, 4, (128, 256), "chunks"),
    ("all-gather", 4096, 2048, 4096, 8, (128, 128), "chunks"),
    ("all-gather", 8192, 8192, 8192, 2, (128, 256), "chunks"),
    ("all-gather", 16384, 8192, 8192, 4, (128, 256), "chunks"),
    ("all-gather", 2048, 4096, 4096, 1, (128, 256), "chunks"),
    ("reduce-scatter", 256, 28672, 8192, 2, (128, 256), "chunks"),
    ("reduce-scatter", 2048, 8192, 4096, 4, (128, 256), "chunks"),
    ("reduce-scatter", 8192, 8192, 8192, 2, (128, 256), "chunks"),
    ("reduce-scatter", 8192, 8192, 8192, 2, (128, 256), "auto"),
    ("reduce-scatter", 8192, 4096, 8192, 4, (128, 256), "epilogue"),
    ("reduce-scatter", 16384, 2048, 8192, 8, (128, 256), "auto"),
    ("reduce-scatter", 1024, 4096, 4096, 1, (128, 256), "auto"),
    ("all-reduce", 128, 4096, 4096, 2, (128, 256), "chunks"),
    ("all-reduce", 4096, 8192, 4096, 4, (128, 256), "auto"),
    ("all-reduce", 8192, 8192, 8192, 2, (128, 256), "auto"),
    ("all-reduce", 8192, 2048, 8192, 8, (128, 256), "epilogue"),
    ("all-reduce", 16384, 2048, 8192, 4, (128, 256), "chunks"),
]


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


def _cli_choice(cli, collective, m, n, k, world, tile, reduce, *extra):
    out = subprocess.run(
        [
            str(cli),
            "tune",
            "--collective",
            collective,
            "--gemm",
            f"{m}x{n}x{k}",
            "--tile",
            f"{tile[0]}x{tile[1]}",
            "--world",
            str(world),
            "--calib",
            str(CALIB),
            "--reduce",
            reduce,
            "--top",
            "0",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    choice = re.search(r"^choice: (\S+): (.*)$", out.stdout, re.M)
    runs = re.search(r"^runs: (\S+) (\S+) split (\d+) (\S+) (\S+) reduce (\S+)$", out.stdout, re.M)
    assert choice and runs, out.stdout
    decision, algorithm, split, backend, order, red = runs.groups()
    assert decision == choice.group(1)
    return dict(
        decision=decision,
        algorithm=algorithm,
        split=int(split),
        backend=backend,
        tile_order=order,
        reduce=red,
        reason=choice.group(2),
    )


def _op_choice(collective, m, n, k, world, tile, reduce):
    # As OpContext.__init__ calls it with every option "auto" (GemmRs / GemmAr pass their reduce).
    extra = {} if collective == "all-gather" else dict(reduce=reduce)
    c = choice_mod.choose(
        collective,
        m=m,
        n=n,
        k=k,
        world=world,
        dtype="bf16",
        block_m=tile[0],
        block_n=tile[1],
        backend="auto",
        algorithm="auto",
        split=None,
        tile_order="auto",
        mode="auto",
        **extra,
    )
    return dict(
        decision=c.decision,
        algorithm=c.algorithm,
        split=c.split,
        backend=c.backend,
        tile_order=c.tile_order,
        reduce=c.reduce,
        reason=c.reason,
    )


@pytest.fixture(autouse=True)
def _same_calibration(monkeypatch):
    monkeypatch.setenv(choice_mod.CALIBRATION_ENV, str(CALIB))


@pytest.mark.parametrize("collective,m,n,k,world,tile,reduce", SHAPES)
def test_the_cli_and_the_ops_auto_choice_agree(cli, collective, m, n, k, world, tile, reduce):
    cli_choice = _cli_choice(cli, collective, m, n, k, world, tile, reduce, "--no-kernel-level")
    assert _op_choice(collective, m, n, k, world, tile, reduce) == cli_choice


def test_the_table_covers_both_decisions_and_both_reductions(cli):
    """The sweep is only worth its rows if it sees fused and sequential, and a staged choice."""
    seen = [_op_choice(*row) for row in SHAPES]
    assert {c["decision"] for c in seen} == {"fused", "sequential"}
    assert {c["reduce"] for c in seen} == {"chunks", "epilogue"}
    assert {row[4] for row in SHAPES} >= {1, 2, 4, 8}


def test_sy_tune_shows_the_cli_decision_and_reason(cli):
    """With its defaults (kernel-level considered) sy.tune and `syncopate tune` say the same."""
    for collective, m, n, k, world, tile, reduce in SHAPES[::6]:
        r = sy.tune(collective, sy.GemmShape(m, n, k, *tile), world, sy.calibration(str(CALIB)), reduce=reduce)
        shown = _cli_choice(cli, collective, m, n, k, world, tile, reduce)
        assert (r.decision, r.reason) == (shown["decision"], shown["reason"])
        assert (r.chosen.algorithm, r.chosen.split, r.chosen.backend, r.chosen.order, r.chosen.reduce) == (
            shown["algorithm"],
            shown["split"],
            shown["backend"],
            shown["tile_order"],
            shown["reduce"],
        )
