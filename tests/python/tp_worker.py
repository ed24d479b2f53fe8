"""One rank of test_tp_multirank.py: the fused ops, syncopate.nn and the example's block at world
size W over gloo on the CPU, forward and backward, against float64 torch on the whole tensors.

At these sizes every op context chooses the sequential path (ops/choice.py), which at W > 1 runs
torch's collective on the process group and torch.matmul: on gloo, CPU tensors work. So this
exercises the real custom ops, their backward formulas (which collective each gradient needs,
on which rows) and the modules' sharding, with W processes; only the fused kernels and the
symmetric heap are left to the GPU tests.

    run(rank, world, port, out_dir)   # writes out_dir/rank<r>.json: {check: relative error | "error: ..."}
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def run(rank: int, world: int, port: int, out_dir: str) -> None:
    # The installed package, as in the parent (conftest.py): a test module of the parent may have
    # put the source tree's python/ (no compiled modules) on the sys.path this process inherited.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "python"]
    os.environ["TRITON_INTERPRET"] = "1"  # the ops accept CPU tensors under the interpreter
    os.environ.setdefault("SYNCOPATE_CALIBRATION", str(REPO / "calib" / "h200.json"))
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    results = {}
    try:
        _patch_cpu_barrier(dist)
        for check in (check_ops, check_modules, check_block):
            try:
                results.update(check(rank, world))
            except Exception:
                results[check.__name__] = "error: " + traceback.format_exc()[-2000:]
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
        dist.barrier()
        dist.destroy_process_group()
    # Leave without the interpreter's teardown. What this rank checked is in its JSON file; what
    # is left is torch's own exit path, where gloo's threads and the TCP store can still be
    # running while static objects are destroyed: about one run in ten aborted there ("terminate
    # called without an active exception", no Python frame, after the results were written),
    # failing the test for nothing the test is about.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _patch_cpu_barrier(dist) -> None:
    """The contexts end their constructor with dist.barrier(device_ids=[device.index]), which
    torch refuses for a CPU device (index None); on the CPU a plain barrier is the same."""
    import importlib

    context = importlib.import_module("syncopate.ops.context")  # where OpContext looks barrier up
    real = context.barrier

    def barrier(group, device):
        if device.type == "cpu":
            if group is not None and dist.get_world_size(group) > 1:
                dist.barrier(group=group)
            return
        real(group, device)

    context.barrier = barrier


def _gen(name: str):
    import torch

    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def _rel(got, ref) -> float:
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def check_ops(rank: int, world: int) -> dict:
    """Each op on its tensor-parallel layout; rank r's output and gradients vs float64 slices."""
    import torch

    import syncopate.ops as sops

    bf16 = torch.bfloat16
    out = {}
    m, k, n = 8 * world, 24, 16
    # The backward's all-gather as the GPU tests with gloo run it (autograd.gather_by_all_reduce).
    import torch.distributed as dist
    from syncopate.ops.autograd import _wait, gather_by_all_reduce

    g = _gen("gather by all-reduce")
    x_full = torch.randn(m, k, generator=g).to(bf16)
    rows = slice(rank * (m // world), (rank + 1) * (m // world))
    gathered = _wait(gather_by_all_reduce(x_full[rows].clone(), world, dist.group.WORLD.group_name), world)
    out["gather_by_all_reduce"] = float((gathered != x_full).sum().item())  # exact, so 0 mismatches
    for layout in ("kn", "nk"):

        def weight(w_full_kn):  # [K, N] as the op takes it: contiguous, or a Linear weight's .t()
            w = w_full_kn.t().contiguous() if layout == "nk" else w_full_kn.contiguous()
            w = w.detach().requires_grad_(True)
            return w, (w.t() if layout == "nk" else w)

        def grad_of(w):
            return w.grad.t() if layout == "nk" else w.grad

        # ag_gemm and ag_gemm_gathered: column-parallel, x rows split, W columns split.
        for op in ("ag_gemm", "ag_gemm_gathered"):
            g = _gen(f"{op} {layout}")
            x_full = torch.randn(m, k, generator=g).to(bf16)
            w_full = torch.randn(k, n * world, generator=g).to(bf16)
            gy_full = torch.randn(m, n * world, generator=g).to(bf16)
            cols = slice(rank * n, (rank + 1) * n)
            rows = slice(rank * (m // world), (rank + 1) * (m // world))
            x = x_full[rows].clone().requires_grad_(True)
            w, b = weight(w_full[:, cols])
            if op == "ag_gemm":
                y = sops.ag_gemm(x, b)
            else:
                y, gathered = sops.ag_gemm_gathered(x, b)
                out[f"{op} {layout} gathered"] = _rel(gathered, x_full)
            y.backward(gy_full[:, cols])
            xr = x_full.double().requires_grad_(True)
            wr = w_full.double().requires_grad_(True)
            (xr @ wr).backward(gy_full.double())
            out[f"{op} {layout} out"] = _rel(y, (x_full.double() @ w_full.double())[:, cols])
            out[f"{op} {layout} x.grad"] = _rel(x.grad, xr.grad[rows])
            out[f"{op} {layout} w.grad"] = _rel(grad_of(w), wr.grad[:, cols])

        # gemm_rs and gemm_ar: row-parallel, x columns split, W rows split.
        for op in ("gemm_rs", "gemm_ar"):
            g = _gen(f"{op} {layout}")
            x_full = torch.randn(m, k * world, generator=g).to(bf16)
            w_full = torch.randn(k * world, n, generator=g).to(bf16)
            gy_full = torch.randn(m, n, generator=g).to(bf16)  # the gradient of the whole sum
            inner = slice(rank * k, (rank + 1) * k)
            rows = slice(rank * (m // world), (rank + 1) * (m // world))
            x = x_full[:, inner].clone().requires_grad_(True)
            w, b = weight(w_full[inner])
            y = getattr(sops, op)(x, b)
            mine = rows if op == "gemm_rs" else slice(None)
            y.backward(gy_full[mine])
            xr = x_full.double().requires_grad_(True)
            wr = w_full.double().requires_grad_(True)
            # gemm_rs: rank r's rows carry gy's rows r; gemm_ar: every rank holds the whole sum and
            # the same gradient of it (the backward of an all-reduce is the identity).
            (xr @ wr).backward(gy_full.double())
            out[f"{op} {layout} out"] = _rel(y, (x_full.double() @ w_full.double())[mine])
            out[f"{op} {layout} x.grad"] = _rel(x.grad, xr.grad[:, inner])
            out[f"{op} {layout} w.grad"] = _rel(grad_of(w), wr.grad[inner])
    return out


def check_modules(rank: int, world: int) -> dict:
    """Column- then row-parallel MLP ([S, B, H] sequence first, with biases), with and without
    sequence parallelism, against nn.Linear layers holding the whole weights."""
    import torch
    import torch.nn.functional as F

    import syncopate.nn as snn

    bf16 = torch.bfloat16
    out = {}
    seq, batch, hidden, ffn = 4 * world, 2, 16, 8 * world
    for sp in (True, False):
        g = _gen(f"mlp {sp}")
        ref_up, ref_down = torch.nn.Linear(hidden, ffn).to(bf16), torch.nn.Linear(ffn, hidden).to(bf16)
        for p in list(ref_up.parameters()) + list(ref_down.parameters()):
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        up = snn.ColumnParallelLinear(hidden, ffn, sequence_parallel=sp, device="cpu")
        down = snn.RowParallelLinear(ffn, hidden, sequence_parallel=sp, device="cpu")
        up.load_full(ref_up.weight, ref_up.bias)
        down.load_full(ref_down.weight, ref_down.bias)
        x_full = torch.randn(seq, batch, hidden, generator=g).to(bf16)
        gy_full = torch.randn(seq, batch, hidden, generator=g).to(bf16)
        rows = slice(rank * seq // world, (rank + 1) * seq // world)
        x = (x_full[rows] if sp else x_full).clone().requires_grad_(True)
        y = down(F.silu(up(x)))
        y.backward(gy_full[rows] if sp else gy_full)
        if sp:
            snn.allreduce_sequence_parallel_grads(down)  # the replicated bias saw rank r's rows
        ref = {
            n: p.detach().double().requires_grad_(True)
            for n, p in (
                ("up.w", ref_up.weight),
                ("up.b", ref_up.bias),
                ("down.w", ref_down.weight),
                ("down.b", ref_down.bias),
            )
        }
        xr = x_full.double().requires_grad_(True)
        yr = F.linear(F.silu(F.linear(xr, ref["up.w"], ref["up.b"])), ref["down.w"], ref["down.b"])
        yr.backward(gy_full.double())
        f = ffn // world
        tag = "sp" if sp else "no-sp"
        out[f"mlp {tag} out"] = _rel(y, yr[rows] if sp else yr)
        out[f"mlp {tag} x.grad"] = _rel(x.grad, xr.grad[rows] if sp else xr.grad)
        out[f"mlp {tag} up.w.grad"] = _rel(up.weight.grad, ref["up.w"].grad[rank * f : (rank + 1) * f])
        out[f"mlp {tag} up.b.grad"] = _rel(up.bias.grad, ref["up.b"].grad[rank * f : (rank + 1) * f])
        out[f"mlp {tag} down.w.grad"] = _rel(down.weight.grad, ref["down.w"].grad[:, rank * f : (rank + 1) * f])
        out[f"mlp {tag} down.b.grad"] = _rel(down.bias.grad, ref["down.b"].grad)
    return out


def check_block(rank: int, world: int) -> dict:
    """The example's tiny LLaMA block, its own comparison (every tensor's relative error), on
    syncopate.nn's layers and on the benchmark's PyTorch TP layers (bench/tp_baselines.py)."""
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    sys.path.insert(0, str(REPO / "bench"))
    import tp_baselines
    import tp_llama_block as blk

    cfg = blk.SIZES["tiny"]
    if cfg.kv_heads % world:
        return {}
    seq = 8 * world
    full = {n: t.to(torch.bfloat16) for n, t in blk.full_weights(cfg, 0, "cpu").items()}
    x_full, target = blk.inputs(cfg, seq, 2, 0, torch.bfloat16, "cpu")
    ref = blk.reference_step(cfg, full, x_full, target)
    out = {}
    for tag, layers in (
        ("block", {}),
        ("block-torch-tp", dict(column=tp_baselines.TorchColumn, row=tp_baselines.TorchRow)),
    ):
        block = blk.build(cfg, blk.parse_args(["--device", "cpu"]), rank, world, torch.device("cpu"), None, **layers)
        blk.load_shards(block, full, rank, world)
        runner = blk.Runner(block, x_full, target, rank, world)
        loss, y = runner.step()
        out.update({f"{tag} {name}": err for name, err in runner.compare(loss, y, ref).items()})
    return out
