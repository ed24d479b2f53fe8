"""Hierarchical (multi-node) plans on the GPUs of one host, emulating several nodes: the ranks
are split into nodes by SYNCOPATE_NODES (default 2: ranks 0..W/2-1 node 0, the rest node 1);
chunks inside a node use the copy engine or SM copy through the node's symmetric heap, chunks
between nodes use NCCL. Run with NCCL forced onto its network transport so the inter-node
chunks really leave NVLink:

  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 SYNCOPATE_NODES=2 \\
      torchrun --nproc-per-node 4 tests/gpu/test_multinode_gpu.py

(needs one GPU per rank: NCCL refuses two ranks on one device). Each case runs a template
through PlanWorkspace twice (two epochs) and checks every element against the collective's
promise (exact: small integers in f32). In shared mode (fewer GPUs than ranks) only the heap's
topology is checked: peers of the own node are mapped, the others refused by name.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist

import syncopate as sy
from syncopate.ops.topology import detect_nodes
from syncopate.runtime import PlanWorkspace, open_heap

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


def shard(size: int, parts: int, i: int):
    base, rem = divmod(size, parts)
    begin = i * base + min(i, rem)
    return begin, begin + base + (1 if i < rem else 0)


def values(rank: int, rows: int, cols: int, device) -> torch.Tensor:
    """Rank `rank`'s input: small integers, exact in f32 when summed over 16 ranks."""
    idx = torch.arange(rows * cols, device=device, dtype=torch.float32).view(rows, cols)
    return (idx % 97) + 100 * (rank + 1)


def run_case(group, world, rank, device, nodes, coll, algorithm, split, backend):
    rows, cols = world * split * 4, 64
    plan = sy.make_plan(
        coll,
        world_size=world,
        shape=[rows, cols],
        algorithm=algorithm,
        split=split,
        dtype="f32",
        backend=backend,
        nodes=nodes,
    )
    assert list(plan.nodes) == nodes and sy.verify(plan).ok
    ws = PlanWorkspace(plan, group, device=device)
    x = ws.tensor("x", torch.float32)
    everyone = [values(r, rows, cols, device) for r in range(world)]
    worst = 0.0
    for call in range(2):
        ws.begin()
        if coll == "all-gather":
            x.zero_()
            lo, hi = shard(rows, world, rank)
            x[lo:hi] = everyone[rank][lo:hi] + call
        else:
            x.copy_(everyone[rank] + call)
        if coll == "all-to-all":
            ws.tensor("y", torch.float32).zero_()
        torch.cuda.current_stream(device).synchronize()
        ws.issue(wait_landed=True)
        ws.end()
        ws.check()
        if coll == "all-gather":
            want = torch.cat([everyone[r][slice(*shard(rows, world, r))] for r in range(world)]) + call
            got = x
        elif coll in ("reduce-scatter", "all-reduce"):
            total = sum(everyone) + world * call
            if coll == "reduce-scatter":
                lo, hi = shard(rows, world, rank)
                want, got = total[lo:hi], x[lo:hi]
            else:
                want, got = total, x
        else:
            y = ws.tensor("y", torch.float32)
            lo, hi = shard(rows, world, rank)
            want = torch.cat([everyone[r][lo:hi] + call for r in range(world)])
            got = y
        worst = max(worst, (got - want).abs().max().item())
    return worst == 0.0, f"max_abs_err={worst:g} chunks={plan.num_chunks}"


def check_heap_topology(group, world, rank, device, nodes):
    """Shared mode: the heap maps the own node's peers only."""
    heap = open_heap(1 << 20, group, device, nodes=nodes)
    for r in range(world):
        if nodes[r] == nodes[rank]:
            heap.base(r)
        else:
            try:
                heap.base(r)
                return False, f"rank {r} on node {nodes[r]} is mapped"
            except sy.UserError as exc:
                if "peer-off-node" not in str(exc):
                    return False, f"unexpected error: {exc}"
    return True, "own node mapped, other nodes refused"


def main():
    sys.path.insert(0, os.path.dirname(__file__))
    from gpu_group import GpuGroup

    gpu_group = GpuGroup()
    rank, world, group, device = gpu_group.rank, gpu_group.world, gpu_group.group, gpu_group.device
    if world < 2:
        raise SystemExit("test_multinode_gpu.py needs at least 2 ranks (one per emulated node)")
    os.environ.setdefault("SYNCOPATE_NODES", "2")
    nodes = detect_nodes(list(range(world))) or [0] * world
    if rank == 0:
        print(
            f"== mode: {gpu_group.mode}, nodes {nodes}, NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE')} "
            f"NCCL_SHM_DISABLE={os.environ.get('NCCL_SHM_DISABLE')}",
            flush=True,
        )
    cases = [("heap-topology", None, None, None)] if len(set(nodes)) > 1 else []
    if not gpu_group.shared and len(set(nodes)) > 1:
        cases += [
            (c, a, s, b)
            for c in COLLECTIVES
            for a in ("ring", "direct", "bidir")
            for s in (1, 2)
            for b in ("copy-engine", "sm-copy")
        ]
    passed = failed = 0
    for coll, algorithm, split, backend in cases:
        name = coll if algorithm is None else f"{coll} {algorithm} split={split} inside={backend}"
        try:
            if algorithm is None:
                ok, detail = check_heap_topology(group, world, rank, device, nodes)
            else:
                ok, detail = run_case(group, world, rank, device, nodes, coll, algorithm, split, backend)
        except Exception as exc:  # noqa: BLE001 - every failure is a recorded case
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'PASS' if ok else 'FAIL'} rank={rank} node={nodes[rank]} {name} world={world} {detail}", flush=True)
        gpu_group.barrier()
    if gpu_group.shared and rank == 0:
        print("SKIP hierarchical plans: ranks share a GPU and NCCL refuses two ranks on one device", flush=True)
    totals = gpu_group.all_reduce_sum(torch.tensor([passed, failed], device=device))
    if rank == 0:
        print(
            f"SUMMARY world={world} nodes={len(set(nodes))} passed={int(totals[0])} "
            f"failed={int(totals[1])} device={torch.cuda.get_device_name()} gpus={torch.cuda.device_count()}",
            flush=True,
        )
    gpu_group.barrier()
    dist.destroy_process_group()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
