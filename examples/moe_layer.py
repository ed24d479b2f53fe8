"""A mixture-of-experts layer on syncopate.ops.moe, checked against plain PyTorch.

    torchrun --nproc-per-node W examples/moe_layer.py [--size tiny-top2|tiny-top8|mixtral|deepseek]
                                                      [--routing random|skewed] [--tokens T]
                                                      [--capacity C] [--mode auto|fused|sequential]
                                                      [--backend copy-engine|sm-copy|nccl] [--slots]

Each rank holds T tokens and E/W experts (SwiGLU: gate and up [H, F] in one [H, 2F] matrix, down
[F, H]); a router picks each token's top-k experts. The layer dispatches the tokens to their
experts' ranks with the up projection (dispatch_gemm), applies SwiGLU, and brings the down
projection's rows back weighted (combine_gemm). The reference runs every expert on every token of
this rank in float64 with the full weights (no collective). `--routing skewed` sends most tokens
to one expert and none to another, the cases a fused kernel's capacity and empty experts must
handle. `--slots` runs dispatch_slots / combine_slots instead (the rows stay in the fused ops'
capacity slots; no call synchronizes with the host). Without torchrun it runs as one rank; under torchrun NCCL with one GPU per rank, gloo when
ranks share GPUs (correctness only) or with `--device cpu`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch


@dataclasses.dataclass(frozen=True)
class MoeConfig:
    experts: int
    top_k: int
    hidden: int
    ffn: int


SIZES = {
    "tiny-top2": MoeConfig(experts=8, top_k=2, hidden=64, ffn=96),
    "tiny-top8": MoeConfig(experts=64, top_k=8, hidden=64, ffn=32),
    "mixtral": MoeConfig(experts=8, top_k=2, hidden=4096, ffn=14336),  # Mixtral 8x7B widths
    "deepseek": MoeConfig(experts=64, top_k=8, hidden=2048, ffn=1408),  # DeepSeek-MoE-like widths
}
# bf16 operands through two GEMMs and a weighted sum, against float64.
TOLERANCE = 2e-2


def full_weights(cfg: MoeConfig, seed: int, device, dtype):
    """Every expert's weights, the same on every rank: (router [H, E], gate_up [E, H, 2F], down [E, F, H])."""
    g = torch.Generator().manual_seed(seed)
    router = torch.randn(cfg.hidden, cfg.experts, generator=g) / cfg.hidden**0.5
    gate_up = torch.randn(cfg.experts, cfg.hidden, 2 * cfg.ffn, generator=g) / cfg.hidden**0.5
    down = torch.randn(cfg.experts, cfg.ffn, cfg.hidden, generator=g) / cfg.ffn**0.5
    return router.to(device, dtype), gate_up.to(device, dtype), down.to(device, dtype)


def tokens(cfg: MoeConfig, count: int, rank: int, seed: int, device, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    return torch.randn(count, cfg.hidden, generator=g).to(device, dtype)


def routing(cfg: MoeConfig, x: torch.Tensor, router: torch.Tensor, how: str):
    """(expert_ids, weights): the router's top-k; "skewed" biases every token towards expert 1
    and away from the last expert, so expert 1 gets a row from every token and the last none."""
    from syncopate.ops.moe import route

    logits = x.float() @ router.float()
    if how == "skewed":
        logits[:, 1] += 100.0
        logits[:, -1] -= 100.0
    return route(logits.to(x.dtype), cfg.top_k)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def reference(x, expert_ids, weights, gate_up, down) -> torch.Tensor:
    """Every token through its top-k experts in float64, with the full weights."""
    x64, out = x.double(), torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for slot in range(expert_ids.shape[1]):
        for e in expert_ids[:, slot].unique().tolist():
            rows = (expert_ids[:, slot] == e).nonzero().squeeze(1)
            h = swiglu(x64[rows] @ gate_up[e].double()) @ down[e].double()
            out[rows] += weights[rows, slot].double()[:, None] * h
    return out


def run_layer(cfg: MoeConfig, args, rank: int, world: int, group, device) -> dict:
    from syncopate.ops.moe import MoeDispatchCombine

    dtype = getattr(torch, args.dtype)
    router, gate_up, down = full_weights(cfg, args.seed, device, dtype)
    local = slice(rank * cfg.experts // world, (rank + 1) * cfg.experts // world)
    layer = MoeDispatchCombine(
        group,
        num_experts=cfg.experts,
        top_k=cfg.top_k,
        capacity=args.capacity,
        mode=getattr(args, "mode", "auto"),
        backend=getattr(args, "backend", "copy-engine"),
    )
    report = {"steps": []}
    for step in range(args.steps):
        x = tokens(cfg, args.tokens, rank, args.seed + step, device, dtype)
        expert_ids, weights = routing(cfg, x, router, args.routing)
        if getattr(args, "slots", False):
            # The capacity-slot path: rows stay in the fused ops' slots, no host synchronization.
            h_slots, slots = layer.dispatch_slots(x, expert_ids, gate_up[local].contiguous())
            y = layer.combine_slots(swiglu(h_slots), down[local].contiguous(), slots, weights)
            layer.check()  # bad routing (rows over capacity) is reported here, not in the call
            counts = slots.recv_counts.view(world, -1).sum(0).tolist()
        else:
            h, layout = layer.dispatch_gemm(x, expert_ids, gate_up[local].contiguous())
            y = layer.combine_gemm(swiglu(h), down[local].contiguous(), layout, weights)
            counts = layout.rows_per_expert
        ref = reference(x, expert_ids, weights, gate_up, down)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        report["steps"].append(
            {
                "step": step,
                "error": err,
                "rows_per_expert": counts,
                "mode": layer.last_mode,
                "combine_mode": layer.last_combine_mode,
            }
        )
    report["worst"] = max(s["error"] for s in report["steps"])
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny-top2")
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank")
    p.add_argument("--routing", choices=("random", "skewed"), default="random")
    p.add_argument("--capacity", type=int, default=None, help="most rows one expert takes from one rank")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument(
        "--mode",
        choices=("auto", "fused", "sequential"),
        default="auto",
        help="the dispatch: fused needs --capacity (a multiple of 64) and CUDA",
    )
    p.add_argument(
        "--backend",
        choices=("copy-engine", "sm-copy", "nccl"),
        default="copy-engine",
        help="the fused calls' chunks (sm-copy: the dispatch moves only each slot's counted rows; nccl: one "
        "GPU per rank)",
    )
    p.add_argument(
        "--slots",
        action="store_true",
        help="dispatch_slots / combine_slots (the fused path with no host synchronization; needs --capacity)",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def setup(args):
    """(rank, world, device, group): one rank without torchrun; under torchrun NCCL with one GPU
    per rank, gloo when ranks share GPUs (a correctness mode) or on the CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.device == "cpu":
        device = torch.device("cpu")
    elif "RANK" in os.environ:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cuda", torch.cuda.current_device())
    if world == 1 or "RANK" not in os.environ:
        return 0, 1, device, None
    import torch.distributed as dist

    shared = device.type == "cuda" and world > torch.cuda.device_count()
    backend = "gloo" if device.type == "cpu" or shared else "nccl"
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device, dist.group.WORLD


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = SIZES[args.size]
    rank, world, device, group = setup(args)
    report = run_layer(cfg, args, rank, world, group, device)
    if rank == 0:
        for s in report["steps"]:
            print(f"step {s['step']}: relative error {s['error']:.2e}, rows per local expert {s['rows_per_expert']}")
        ok = report["worst"] <= TOLERANCE
        print(
            f"{'PASS' if ok else 'FAIL'} world={world} size={args.size} routing={args.routing}: worst relative "
            f"error {report['worst']:.2e} (tolerance {TOLERANCE:.0e})"
        )
    if group is not None:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0 if report["worst"] <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
