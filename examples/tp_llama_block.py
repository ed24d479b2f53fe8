#!/usr/bin/env python3
"""A LLaMA-style transformer block, tensor-parallel with sequence parallelism on Syncopate's fused
ops, run forward and backward and checked against the same block in plain PyTorch.

    python3 examples/tp_llama_block.py --size tiny --device cpu        # world 1, Triton's interpreter
    torchrun --nproc-per-node 1 examples/tp_llama_block.py --size llama3-8b --seq 4096
    torchrun --nproc-per-node 4 examples/tp_llama_block.py --size tiny --seq 256   # 4 ranks, 1 GPU: gloo
    ... --compile (torch.compile, fullgraph) --cuda-graph (forward + backward captured, replayed)

The block (RMSNorm, attention with rotary embeddings and grouped KV heads, SwiGLU MLP):

    x [S/w, B, H]  (this rank's positions: the sequence is split across ranks outside the GEMMs)
    h = RMSNorm(x);  q, k, v = QKV(h)              ColumnParallelLinear: AG+GEMM -> [S, B, heads/w]
    x = x + O(attention(rope(q), rope(k), v))      RowParallelLinear:    GEMM+RS -> [S/w, B, H]
    h = RMSNorm(x);  g, u = GateUp(h)              ColumnParallelLinear: AG+GEMM -> [S, B, 2 ffn/w]
    x = x + Down(silu(g) * u)                      RowParallelLinear:    GEMM+RS -> [S/w, B, H]

Each rank holds heads/w query heads, kv_heads/w KV heads and ffn/w MLP features. The reference
is the same block in PyTorch with the whole weights (each TP module holds its rank's shard of
them: QKV and GateUp shards are this rank's rows of each of q, k, v / gate, up), run on the
whole sequence in float32 from the same bf16 values. The check compares the loss, the output,
the input gradient and every weight's gradient (the norms' after summing them over ranks, as
sequence parallelism needs) by relative error ||tp - ref|| / ||ref||.

Under torchrun every rank runs it; with more ranks than GPUs they share GPUs (rank r on GPU
r mod count) and the process group is gloo (NCCL takes one GPU per rank); without torchrun it
runs at world 1 with no process group. --device cpu runs at world 1 on the CPU, the kernels in
Triton's interpreter (tests/python/test_tp_llama_block.py). Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def qkv_features(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


# The layer widths of LLaMA-3 8B and 70B, and a tiny one for tests (heads and KV heads divisible
# by 1, 2 and 4).
SIZES = {
    "llama3-8b": BlockConfig(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336),
    "llama3-70b": BlockConfig(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672),
    "tiny": BlockConfig(hidden=64, heads=8, kv_heads=4, head_dim=8, ffn=128),
}

# bf16 (8 bits of mantissa) through a whole block and its backward: the relative error of each
# tensor against the float32 reference; fp16 has 3 more bits.
TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3}


def check_divisible(cfg: BlockConfig, world: int, seq: int) -> None:
    """ValueError naming what cannot be split over `world` ranks."""
    for name, value in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn", cfg.ffn), ("seq", seq)):
        if value % world:
            raise ValueError(f"tp_llama_block: {name}={value} is not divisible by the world size {world}")


# --- the block ------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: the statistics in float32, the weight applied in the model's dtype. Its
    weight is replicated and sees this rank's positions only: marked sequence_parallel."""

    def __init__(self, hidden: int, eps: float, dtype, device):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype, device=device))
        self.weight.sequence_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x [S, B, heads, head_dim] at positions 0 .. S-1 (rotate-half form)."""
    seq, dim = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), inv_freq)
    cos = torch.cat((angles, angles), dim=-1).cos()[:, None, None, :]
    sin = torch.cat((angles, angles), dim=-1).sin()[:, None, None, :]
    half = dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention with grouped KV heads: q [S, B, h, d], k and v [S, B, kv, d] -> [S, B, h*d]."""
    seq, batch, heads, dim = q.shape
    group = heads // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    out = F.scaled_dot_product_attention(
        q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), is_causal=True
    )
    return out.permute(2, 0, 1, 3).reshape(seq, batch, heads * dim)


class TPBlock(nn.Module):
    """The tensor-parallel block. `column` and `row` make its linear layers with the constructor
    of syncopate.nn.ColumnParallelLinear / RowParallelLinear (in_features, out_features, bias=,
    group=, dtype=, device=): syncopate's, or the benchmark's PyTorch baselines."""

    def __init__(
        self,
        cfg: BlockConfig,
        *,
        column: Callable,
        row: Callable,
        world: int,
        group=None,
        dtype=torch.bfloat16,
        device=None,
    ):
        super().__init__()
        check_divisible(cfg, world, world)
        self.cfg, self.world = cfg, world
        self.local_heads, self.local_kv = cfg.heads // world, cfg.kv_heads // world
        kw = dict(bias=False, group=group, dtype=dtype, device=device)
        self.attn_norm = RMSNorm(cfg.hidden, cfg.norm_eps, dtype, device)
        self.qkv = column(cfg.hidden, cfg.qkv_features, **kw)
        self.o = row(cfg.heads * cfg.head_dim, cfg.hidden, **kw)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.norm_eps, dtype, device)
        self.gate_up = column(cfg.hidden, 2 * cfg.ffn, **kw)
        self.down = row(cfg.ffn, cfg.hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        h = self.qkv(self.attn_norm(x))  # [S, B, (h + 2 kv) d / w]
        seq, batch = h.shape[0], h.shape[1]
        d = cfg.head_dim
        q, k, v = h.split([self.local_heads * d, self.local_kv * d, self.local_kv * d], dim=-1)
        q = rope(q.reshape(seq, batch, self.local_heads, d), cfg.rope_theta)
        k = rope(k.reshape(seq, batch, self.local_kv, d), cfg.rope_theta)
        v = v.reshape(seq, batch, self.local_kv, d)
        x = x + self.o(attention(q, k, v))  # [S/w, B, H]
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


# --- the whole weights, their shards, the reference ----------------------------------------------


def full_weights(cfg: BlockConfig, seed: int, device) -> dict:
    """The whole block's weights in float32, nn.Linear's distribution, the same on every rank."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def linear(out_f, in_f):
        bound = 1.0 / math.sqrt(in_f)
        return (torch.rand(out_f, in_f, generator=gen, device=device) * 2 - 1) * bound

    def norm():  # not all ones, so that a wrong norm gradient shows
        return 1 + 0.1 * torch.randn(cfg.hidden, generator=gen, device=device)

    d = cfg.head_dim
    return {
        "attn_norm": norm(),
        "q": linear(cfg.heads * d, cfg.hidden),
        "k": linear(cfg.kv_heads * d, cfg.hidden),
        "v": linear(cfg.kv_heads * d, cfg.hidden),
        "o": linear(cfg.hidden, cfg.heads * d),
        "mlp_norm": norm(),
        "gate": linear(cfg.ffn, cfg.hidden),
        "up": linear(cfg.ffn, cfg.hidden),
        "down": linear(cfg.hidden, cfg.ffn),
    }


def rows_of(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.shape[0] // world
    return t[rank * n : (rank + 1) * n]


def cols_of(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.shape[1] // world
    return t[:, rank * n : (rank + 1) * n]


def shards(full: dict, rank: int, world: int) -> dict:
    """This rank's part of each TP module's weight (and of a gradient of the same layout)."""
    return {
        "attn_norm": full["attn_norm"],
        "mlp_norm": full["mlp_norm"],
        "qkv": torch.cat([rows_of(full[n], rank, world) for n in ("q", "k", "v")]),
        "o": cols_of(full["o"], rank, world),
        "gate_up": torch.cat([rows_of(full[n], rank, world) for n in ("gate", "up")]),
        "down": cols_of(full["down"], rank, world),
    }


def load_shards(block: TPBlock, full: dict, rank: int, world: int) -> None:
    with torch.no_grad():
        for name, shard in shards(full, rank, world).items():
            getattr(block, name).weight.copy_(shard)


def reference_block(x: torch.Tensor, w: dict, cfg: BlockConfig) -> torch.Tensor:
    """The block in plain PyTorch with the whole weights: x [S, B, H] -> [S, B, H]."""
    seq, batch, _ = x.shape
    d = cfg.head_dim
    h = rms_norm(x, w["attn_norm"], cfg.norm_eps)
    q = rope((h @ w["q"].t()).reshape(seq, batch, cfg.heads, d), cfg.rope_theta)
    k = rope((h @ w["k"].t()).reshape(seq, batch, cfg.kv_heads, d), cfg.rope_theta)
    v = (h @ w["v"].t()).reshape(seq, batch, cfg.kv_heads, d)
    x = x + attention(q, k, v) @ w["o"].t()
    h = rms_norm(x, w["mlp_norm"], cfg.norm_eps)
    return x + (F.silu(h @ w["gate"].t()) * (h @ w["up"].t())) @ w["down"].t()


def inputs(cfg: BlockConfig, seq: int, batch: int, seed: int, dtype, device):
    """The whole input x [S, B, H] (in `dtype`) and the loss's target [S, B, H] (float32)."""
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(seq, batch, cfg.hidden, generator=gen, device=device).to(dtype)
    target = torch.randn(seq, batch, cfg.hidden, generator=gen, device=device)
    return x, target


def loss_of(out: torch.Tensor, target: torch.Tensor, tokens: int) -> torch.Tensor:
    """A linear loss: every output element gets a gradient of its own (target / tokens)."""
    return (out.float() * target).sum() / tokens


def reference_step(cfg: BlockConfig, full: dict, x: torch.Tensor, target: torch.Tensor) -> dict:
    """Loss, output and gradients of the reference (float32 from the bf16 values it is given)."""
    w = {name: t.detach().clone().float().requires_grad_(True) for name, t in full.items()}
    xr = x.detach().float().requires_grad_(True)
    out = reference_block(xr, w, cfg)
    loss = loss_of(out, target, x.shape[0] * x.shape[1])
    loss.backward()
    grads = {name: t.grad for name, t in w.items()}
    # The loss is a dot product of the output with a zero-mean target: its value cancels, so its
    # error is measured against the dot product's condition, ||out|| ||target|| / tokens
    # (relative to the value itself, a bf16 block missed by 9% at S = 8192 while every
    # output element was within 3e-3).
    scale = torch.linalg.vector_norm(out.detach()) * torch.linalg.vector_norm(target) / (x.shape[0] * x.shape[1])
    return {"loss": loss.detach(), "loss_scale": scale, "out": out.detach(), "x_grad": xr.grad, "grads": grads}


# --- running the TP block and comparing ------------------------------------------------------------


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


class Runner:
    """One TP block on this rank: its input shard, its step, its comparison with the reference."""

    def __init__(self, block: TPBlock, x_full: torch.Tensor, target: torch.Tensor, rank: int, world: int, group=None):
        self.block, self.rank, self.world, self.group = block, rank, world, group
        self.x = rows_of(x_full, rank, world).detach().clone().requires_grad_(True)
        self.target = rows_of(target, rank, world)
        self.tokens = x_full.shape[0] * x_full.shape[1]
        self.forward = block
        self.graph = None

    def step(self):
        """Forward and backward from zeroed gradients; (loss on this rank's positions, output)."""
        for p in list(self.block.parameters()) + [self.x]:
            p.grad = None
        out = self.forward(self.x)
        loss = loss_of(out, self.target, self.tokens)
        loss.backward()
        return loss.detach(), out.detach()

    def capture(self, warmup: int = 3) -> None:
        """Record one step in a CUDA graph (after warm-up on a side stream, as torch requires);
        step() then replays it. The gradients live in the tensors the capture allocated."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                self.step()
        torch.cuda.current_stream().wait_stream(stream)
        for p in list(self.block.parameters()) + [self.x]:
            p.grad = None
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            out = self.forward(self.x)
            loss = loss_of(out, self.target, self.tokens)
            loss.backward()
        self.static = (loss, out)
        self.step = self._replay

    def _replay(self):
        self.graph.replay()
        return self.static[0].detach(), self.static[1].detach()

    def compare(self, loss: torch.Tensor, out: torch.Tensor, ref: dict) -> dict:
        """{name: relative error} of this rank's tensors against the reference's."""
        import syncopate.nn as snn

        total = loss.detach().clone().float()
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(total, group=self.group)
            snn.allreduce_sequence_parallel_grads(self.block, self.group)
        ref_shards = shards(ref["grads"], self.rank, self.world)
        errors = {
            "loss": abs(total.item() - ref["loss"].item()) / max(ref["loss_scale"].item(), 1e-30),
            "out": relative_error(out, rows_of(ref["out"], self.rank, self.world)),
            "x.grad": relative_error(self.x.grad, rows_of(ref["x_grad"], self.rank, self.world)),
        }
        for name, shard in ref_shards.items():
            errors[f"{name}.grad"] = relative_error(getattr(self.block, name).weight.grad, shard)
        return errors


def context_decisions() -> list:
    """What each op context built so far runs: (class, m, k, n, "fused"/"sequential", backend).
    Read from the ops' context cache, where this version of syncopate keeps one."""
    try:
        from syncopate.ops import common
    except ImportError:
        return []
    return [
        (
            type(ctx).__name__,
            getattr(ctx, "m", None),
            getattr(ctx, "k", None),
            getattr(ctx, "n", None),
            getattr(ctx, "decision", None),
            getattr(ctx, "backend", None),
        )
        for ctx in getattr(common, "_CONTEXTS", {}).values()
    ]


def max_over_ranks(errors: dict, world: int, group, device) -> dict:
    if world == 1:
        return errors
    import torch.distributed as dist

    names = sorted(errors)
    t = torch.tensor([errors[n] for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return dict(zip(names, t.tolist()))


# --- set-up ---------------------------------------------------------------------------------------


def setup(args) -> tuple:
    """(rank, world, device, group): torchrun's ranks in a process group, or world 1 without one."""
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        os.environ.setdefault(key, "0" if key == "NCCL_NVLS_ENABLE" else "1")  # multicast stays off
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.device == "cpu":
        if world != 1:
            raise SystemExit("tp_llama_block: --device cpu runs at world 1 only (Triton's interpreter)")
        return 0, 1, torch.device("cpu"), None
    if "RANK" not in os.environ:  # not under torchrun: one rank, no process group
        return 0, 1, torch.device("cuda", torch.cuda.current_device()), None
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", local % gpus)
    torch.cuda.set_device(device)
    shared = world > gpus
    backend = args.backend or ("gloo" if shared else "nccl")
    if backend == "nccl" and shared:
        raise SystemExit(
            f"tp_llama_block: {world} ranks on {gpus} GPU(s) share GPUs; NCCL needs one GPU "
            "per rank, use --backend gloo"
        )
    if backend == "gloo" and args.cuda_graph:
        raise SystemExit(
            "tp_llama_block: --cuda-graph needs NCCL (gloo runs its collectives on the host, "
            "which a CUDA graph cannot capture)"
        )
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device, None


def build(cfg: BlockConfig, args, rank: int, world: int, device, group, column=None, row=None) -> TPBlock:
    import syncopate.nn as snn

    dtype = getattr(torch, args.dtype)
    block = TPBlock(
        cfg,
        column=column or snn.ColumnParallelLinear,
        row=row or snn.RowParallelLinear,
        world=world,
        group=group,
        dtype=dtype,
        device=device,
    )
    return block


def compile_block(block: nn.Module, backend: str, x: torch.Tensor) -> tuple:
    """torch.compile(fullgraph=True) of the block (a graph break raises), and dynamo's summary of
    one trace: graphs, breaks and how many syncopate ops the graphs hold."""
    graphs = []

    def recorder(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(block, fullgraph=True, backend=recorder)(x.detach())
    ops = sorted(
        {
            str(n.target).removesuffix(".default")
            for gm in graphs
            for n in gm.graph.nodes
            if n.op == "call_function" and "syncopate" in str(n.target)
        }
    )
    torch._dynamo.reset()
    return torch.compile(block, fullgraph=True, backend=backend), {"graphs": len(graphs), "syncopate_ops": ops}


def run(argv=None) -> dict:
    """Parses argv, runs the check on this rank and returns its report (every rank the same)."""
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before syncopate loads triton
    rank, world, device, group = setup(args)
    cfg = config_of(args)
    check_divisible(cfg, world, args.seq)
    dtype = getattr(torch, args.dtype)
    full = full_weights(cfg, args.seed, device)
    x_full, target = inputs(cfg, args.seq, args.batch, args.seed, dtype, device)
    block = build(cfg, args, rank, world, device, group)
    # The bf16 weights the TP block holds are the reference's weights too.
    full = {name: t.to(dtype) for name, t in full.items()}
    load_shards(block, full, rank, world)
    ref = reference_step(cfg, full, x_full, target)
    runner = Runner(block, x_full, target, rank, world, group)
    report = {
        "size": args.size,
        "config": dataclasses.asdict(cfg),
        "seq": args.seq,
        "batch": args.batch,
        "dtype": args.dtype,
        "world": world,
        "device": str(device),
        "compile": args.compile,
        "cuda_graph": args.cuda_graph,
        "json": args.json,
    }
    if world > 1:
        import torch.distributed as dist

        report["backend"] = dist.get_backend()
    if args.compile:
        runner.forward, report["trace"] = compile_block(block, args.compile_backend, runner.x)
    if args.cuda_graph:
        runner.capture()
    results = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss, out = runner.step()
        errors = max_over_ranks(runner.compare(loss, out, ref), world, group, device)
        results.append({"step": step, "s": time.perf_counter() - start, "errors": errors})
    tol = args.tolerance or TOLERANCE[dtype]
    worst = max(max(r["errors"].values()) for r in results)
    report.update(steps=results, tolerance=tol, worst=worst, passed=bool(worst <= tol), contexts=context_decisions())
    return report


def config_of(args) -> BlockConfig:
    cfg = SIZES[args.size]
    overrides = {
        k: getattr(args, k) for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn") if getattr(args, k) is not None
    }
    return dataclasses.replace(cfg, **overrides)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    for name in ("hidden", "heads", "kv_heads", "head_dim", "ffn"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=f"override the size's {name}")
    p.add_argument("--seq", type=int, default=64, help="sequence length S (a multiple of the world size)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="process group (default: nccl with one GPU per rank, gloo when ranks share GPUs)",
    )
    p.add_argument("--steps", type=int, default=2, help="forward + backward steps, each checked")
    p.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) the block")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--cuda-graph", action="store_true", help="capture forward + backward in a CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=None)
    p.add_argument("--json", default=None, help="write rank 0's report here")
    args = p.parse_args(argv)
    if args.cuda_graph and args.device == "cpu":
        p.error("--cuda-graph needs --device cuda")
    return args


def main(argv=None) -> int:
    report = run(argv)
    rank = 0
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
    if rank == 0:
        for r in report["steps"]:
            worst = max(r["errors"], key=r["errors"].get)
            print(
                f"step {r['step']}: {r['s'] * 1e3:.1f} ms, worst {worst} {r['errors'][worst]:.2e}, "
                + ", ".join(f"{k} {v:.1e}" for k, v in sorted(r["errors"].items()))
            )
        for name, m, k, n, decision, backend in report["contexts"]:
            print(f"  {name} m={m} k={k} n={n}: {decision}" + (f" ({backend})" if decision == "fused" else ""))
        if "trace" in report:
            print(
                f"torch.compile: {report['trace']['graphs']} graph(s), syncopate ops {report['trace']['syncopate_ops']}"
            )
        print(
            f"{'PASS' if report['passed'] else 'FAIL'} world={report['world']} size={report['size']} "
            f"seq={report['seq']} dtype={report['dtype']} compile={report['compile']} "
            f"cuda_graph={report['cuda_graph']}: worst relative error {report['worst']:.2e} "
            f"(tolerance {report['tolerance']:.0e})"
        )
    if report["json"] and rank == 0:
        with open(report["json"], "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
