"""The op contexts with a given plan (`plan=`, ops/user_plan.py) on the CPU: refused before any
GPU work when it does not match the op; run at world 1 with the CPU stand-in of the workspace;
and imported plans lowered into the fused kernels, run by Triton's interpreter against a float64
reference. The GPU half is tests/gpu/test_imported_plan_gpu.py."""

import json
import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate as sy  # noqa: E402
from syncopate.errors import UserError  # noqa: E402
from syncopate.launch import epoch_word  # noqa: E402
from syncopate.ops.ag_gemm import AgGemm  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402
from syncopate.ops.gemm_rs import GemmRs  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_fused import _b, _fused, _landed, cpu_runtime  # noqa: E402,F401  (fixture)

OP_OF = {AgGemm: ("all-gather", "a"), GemmRs: ("reduce-scatter", "c"), GemmAr: ("all-reduce", "c")}


def ring_xml(world):
    """MSCCL XML of an in-place ring all-gather (as msccl-tools writes it)."""

    def step(s, kind, off):
        buf, at = ("i", 0) if kind == "s" else ("o", off)
        return (
            f'<step s="{s}" type="{kind}" srcbuf="{buf}" srcoff="{at}" dstbuf="o" dstoff="{off}" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>'
        )

    lines = [f'<algo name="ring" nchunksperloop="{world}" ngpus="{world}" coll="allgather" inplace="1">']
    for r in range(world):
        lines.append(
            f'<gpu id="{r}" i_chunks="1" o_chunks="{world}" s_chunks="0">'
            f'<tb id="0" send="{(r + 1) % world}" recv="{(r - 1) % world}" chan="0">'
        )
        lines.append(step(0, "s", r))
        for k in range(1, world):
            lines.append(step(k, "rcs" if k < world - 1 else "r", (r - k) % world))
        lines.append("</tb></gpu>")
    return "\n".join(lines + ["</algo>"])


@pytest.mark.parametrize("cls", [AgGemm, GemmRs, GemmAr])
def test_a_plan_for_another_world_is_refused_before_any_gpu_work(cls):
    collective, tensor = OP_OF[cls]
    plan = sy.make_plan(collective, world_size=4, shape=[256, 64], tensor=tensor)
    with pytest.raises(UserError, match=rf"^{cls.__name__}: the plan is for world size 4, the op's group has 1"):
        cls(None, m=256, k=64, n=64, dtype=torch.bfloat16, device="cpu", plan=plan)


@pytest.mark.parametrize("cls", [AgGemm, GemmRs, GemmAr])
@pytest.mark.parametrize("mode", ["fused", "sequential"])
def test_a_given_plan_runs_at_world_one(cpu_runtime, cls, mode):
    m, k, n = 70, 40, 48
    collective, tensor = OP_OF[cls]
    template = sy.make_plan(collective, world_size=1, shape=[m, k if cls is AgGemm else n], tensor=tensor, dtype="f16")
    # Through MSCCL XML and back: what a user porting a plan would hand over.
    ported = sy.import_plan(
        text=sy.export_msccl_xml(template),
        format="msccl-xml",
        shape=list(template.tensors[tensor].shape),
        tensor=tensor,
        dtype="f16",
    )
    ctx = cls(None, m=m, k=k, n=n, dtype=torch.float16, device="cpu", mode=mode, plan=ported, tile_order="row-major")
    assert (ctx.decision, ctx.algorithm, ctx.backend, ctx.tile_order) == (mode, "given", "copy-engine", "row-major")
    assert ctx.plan == ported.plan
    assert {"fused", "template_fused"} <= set(ctx.predicted_us) and "plan given" in ctx.reason
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(m, k, generator=gen).half(), _b(k, n, "kn", gen)
    out = ctx(a, b, check=True)
    assert torch.allclose(out.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)


def test_an_imported_ring_all_gather_drives_the_fused_kernel():
    m, n, k, world, rank = 72, 40, 40, 3, 1
    ported = sy.import_plan(text=ring_xml(world), format="msccl-xml", shape=[m, k], tensor="a", dtype="f16")
    g = _fused(ported.plan, rank, m, n, k, [("a", "consume", 0, -1)], "kn", producer=False)
    # Rank 1 waits on the two chunks that land on it: every tile of a foreign shard has a wait.
    assert len(g.tables.slot_writers) >= 2
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(m, k, generator=gen).half(), _b(k, n, "kn", gen)
    for epoch in (1, 2):
        c = torch.full((m, n), float("nan"), dtype=torch.float16)
        g.launch(a, b, c, _landed(g, epoch), epoch_word(epoch))
        g.check()
        assert torch.allclose(c.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)


def test_an_imported_reduce_scatter_gates_its_chunks_on_the_producer_tiles():
    m, n, k, world, rank = 64, 72, 40, 2, 0
    # A send/recv reduce-scatter of "c" [64, 72] on 2 ranks: each sends its partial of the other's
    # half, which the owner adds.
    rows = m // world
    ranks = [
        {
            "rank": r,
            "streams": [
                [
                    {"send": 1 - r, "box": [[(1 - r) * rows, (2 - r) * rows], [0, n]]},
                    {"recv": 1 - r, "box": [[r * rows, (r + 1) * rows], [0, n]], "reduce": True},
                ]
            ],
        }
        for r in range(world)
    ]
    ported = sy.import_plan(
        text=json.dumps(
            {
                "format": "syncopate-sendrecv",
                "version": 1,
                "world_size": world,
                "collective": {"kind": "reduce-scatter", "tensor": "c", "dim": 0},
                "tensors": {"c": {"shape": [m, n], "dtype": "f16"}},
                "ranks": ranks,
            }
        ),
        format="sendrecv",
    )
    assert [c.op for c in ported.plan.chunks] == ["reduce-add", "reduce-add"]
    g = _fused(ported.plan, rank, m, n, k, [("c", "produce", 0, 1)], "kn", producer=True)
    gen = torch.Generator().manual_seed(9)
    a, b = torch.randn(m, k, generator=gen).half(), _b(k, n, "kn", gen)
    signals = torch.zeros(len(g.tables.slot_writers), dtype=torch.int32)
    notified = set(g.tables.notify_slots)
    assert notified, "the chunk leaving rank 0 waits for the tiles that write it"
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    g.launch(a, b, c, signals, epoch_word(1))
    g.check()
    assert torch.allclose(c.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)
    for slot in range(len(signals)):
        assert int(signals[slot]) == (g.tables.slot_writers[slot] if slot in notified else 0)
