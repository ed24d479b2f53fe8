"""GPU correctness of the MoE pieces (issue 19) under torchrun: world 1, or 2-4 ranks sharing a GPU
(gpu_group.py: gloo, correctness only).

    torchrun --nproc_per_node=W tests/gpu/test_moe_gpu.py [--calls N] [--results-file FILE]

sequential: MoeDispatchCombine (all-to-all + one matmul per local expert, then back and summed
with the routing weights), bf16, 8 experts top-2 and 16 experts top-4, routing drawn afresh each
call and skewed (expert 0 hot, the last expert receives nothing), against an fp32 reference of
the whole layer computed from every rank's tokens; relative error ||y - ref|| / ||ref||.
grouped-gemm (every rank, locally): kernels/moe_gemm.py on the GPU: the original (TMA loads and
pointer loads) against fp32 per-slot products (bf16, capacity slots with empty, full and ragged
counts), and with NaN in the rows past each count (a TMA block loads them); the transformed
kernel with every chunk landed; with the rows, counts and signals landed late by the copy engine
from a side stream in a shuffled order while the kernel spins (rows poisoned with NaN before);
a withheld chunk ending in WaitTimeoutError naming that chunk (the host waits for that kernel
at most 10 s, so a wait that does not end is reported, not hung on); and one rows chunk of the
fused dispatch's plan never issued by the runtime (drop_chunk): its destination rank's check()
names it.
fused: MoeDispatchCombine(mode="fused") against mode="sequential" on the same skewed routing, new
routing each call, for backends copy-engine, sm-copy and nccl (nccl skipped by name where ranks
share a GPU: NCCL refuses that; at world 1 its plan has local chunks only, so no NCCL call runs):
the dispatch (the MoE dispatch plan's copy-engine / SM-copy / NCCL chunks overlapped
with the transformed waiting grouped GEMM) and the combine of silu(h) (the notifying grouped GEMM
whose slots go home as their tiles finish, then the weighted sum). With SM-copy chunks, only each
slot's counted rows move, and the local rows are read in place: MoeFusedDispatch alone with
x_recv poisoned with NaN keeps NaN past every count.
Prints one line per case and `SUMMARY world=W passed=P failed=F`; exits 1 on any failure. With
--results-file, each rank's log also holds every case's start time, and (faulthandler) every
thread's stack whenever a case runs longer than --case-limit-s.
"""

import argparse
import faulthandler
import os
import random
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Results:
    """Counts and prints the cases. Every case's start is logged with its time since the start
    (so a run cut off by its time limit shows where each rank was), and faulthandler dumps every
    thread's stack into the rank's log when one case runs past `case_limit_s`."""

    def __init__(self, rank, log, case_limit_s=0.0):
        self.rank, self.log, self.passed, self.failed = rank, log, 0, 0
        self.case_limit_s, self.t0 = case_limit_s, time.perf_counter()

    def start(self, name):
        line = f"START rank={self.rank} t={time.perf_counter() - self.t0:.1f}s {name}"
        if self.log:
            self.log.write(line + "\n")
            self.log.flush()
            if self.case_limit_s > 0:
                faulthandler.cancel_dump_traceback_later()
                faulthandler.dump_traceback_later(self.case_limit_s, repeat=True, file=self.log)

    def record(self, name, ok, detail=""):
        elapsed = f"t={time.perf_counter() - self.t0:.1f}s"
        line = f"{'PASS' if ok else 'FAIL'} rank={self.rank} {name} {detail} {elapsed}".rstrip()
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        if self.rank == 0 or not ok:
            print(line, flush=True)
        if self.log:
            self.log.write(line + "\n")
            self.log.flush()

    def run(self, name, fn):
        self.start(name)
        try:
            ok, detail = fn()
        except Exception as exc:  # a case's failure must not stop the others
            ok, detail = False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        self.record(name, ok, detail)


def rel_err(out, ref):
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


# -- sequential dispatch + combine -------------------------------------------------------------------


def skewed_routing(tokens, experts, top_k, gen, device):
    """Top-k ids per token: expert 0 in every token's choice (hot), expert E-1 never chosen."""
    logits = torch.randn(tokens, experts, generator=gen, device="cpu")
    logits[:, 0] += 6.0
    logits[:, experts - 1] = -1e9
    weights, ids = torch.topk(torch.softmax(logits, dim=1), top_k, dim=1)
    weights = weights / weights.sum(dim=1, keepdim=True)
    return ids.to(device), weights.to(device)


def run_sequential(res, group_obj, calls):
    from syncopate.ops.moe import MoeDispatchCombine

    rank, world, device = group_obj.rank, group_obj.world, group_obj.device
    for experts, top_k, tokens, hidden, inter in ((8, 2, 96, 256, 512), (16, 4, 64, 128, 256)):
        if experts % world:
            continue
        local = experts // world
        wgen = torch.Generator().manual_seed(1234)  # the same full weights on every rank
        w_up_all = torch.randn(experts, hidden, inter, generator=wgen) / hidden**0.5
        w_down_all = torch.randn(experts, inter, hidden, generator=wgen) / inter**0.5
        w_up = w_up_all[rank * local : (rank + 1) * local].to(device, torch.bfloat16)
        w_down = w_down_all[rank * local : (rank + 1) * local].to(device, torch.bfloat16)
        layer = MoeDispatchCombine(group_obj.group if world > 1 else None, num_experts=experts, top_k=top_k)
        res.start(f"sequential experts={experts} top_k={top_k}")
        worst, received_hot, received_cold = 0.0, 0, 0
        for call in range(calls):
            gen = torch.Generator().manual_seed(1000 * call + rank)
            x = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
            ids, weights = skewed_routing(tokens, experts, top_k, gen, device)
            h, layout = layer.dispatch_gemm(x, ids, w_up)
            y = layer.combine_gemm(torch.nn.functional.silu(h), w_down, layout, weights.to(torch.bfloat16))
            rows = layout.rows_per_expert
            if rank == 0:
                received_hot = max(received_hot, rows[0])
            if rank == world - 1:
                received_cold = max(received_cold, rows[-1])
            # fp32 reference of this rank's tokens, every expert local.
            xf = x.float()
            ref = torch.zeros(tokens, hidden, device=device)
            for slot in range(top_k):
                for e in range(experts):
                    sel = ids[:, slot] == e
                    if sel.any():
                        up = torch.nn.functional.silu(xf[sel] @ w_up_all[e].to(device))
                        ref[sel] += weights[sel, slot, None].float() * (up @ w_down_all[e].to(device))
            worst = max(worst, rel_err(y, ref))
        ok = worst < 3e-2 and (rank != world - 1 or received_cold == 0)
        res.record(
            f"sequential experts={experts} top_k={top_k} world={world} calls={calls}",
            ok,
            f"worst_rel_err={worst:.2e} hot_rows={received_hot} cold_rows={received_cold}",
        )


# -- grouped GEMM kernel --------------------------------------------------------------------------

WORLD_SLOTS, EXPERTS, CAPACITY, K, N = 3, 2, 256, 512, 384
BLOCK_M, BLOCK_N, BLOCK_K, PROGS = 128, 128, 64, 8


def gemm_problem(device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    slots = WORLD_SLOTS * EXPERTS
    counts = torch.randint(0, CAPACITY + 1, (slots,), generator=gen, dtype=torch.int32)
    counts[0], counts[1], counts[slots - 1] = 0, CAPACITY, 129
    a = torch.randn(slots * CAPACITY, K, generator=gen).to(device, torch.bfloat16)
    w = (torch.randn(EXPERTS, K, N, generator=gen) / K**0.5).to(device, torch.bfloat16)
    return a, w, counts.to(device)


def check_slots(c, a, w, counts):
    from syncopate.ops import moe_fused

    worst = 0.0
    counts_host = counts.tolist()
    for q, want in enumerate(moe_fused.reference(a, w, counts_host, CAPACITY)):
        rows = counts_host[q]
        if rows:
            worst = max(worst, rel_err(c[q * CAPACITY : q * CAPACITY + rows], want))
        if not torch.isnan(c[q * CAPACITY + rows : (q + 1) * CAPACITY].float()).all():
            return False, f"slot {q}: rows past its count {rows} were written"
    return worst < 2e-2, f"worst_rel_err={worst:.2e}"


def run_grouped_gemm(res, device, rank):
    from syncopate.errors import WaitTimeoutError
    from syncopate.kernels import moe_gemm
    from syncopate.launch import check_error, launch
    from syncopate.ops import moe_fused

    tiles_n = -(-N // BLOCK_N)
    a, w, counts = gemm_problem(device)

    def fresh_c():
        return torch.full((a.shape[0], N), float("nan"), device=device, dtype=torch.bfloat16)

    def original(use_tma):
        c = fresh_c()
        args, meta = moe_fused.grouped_gemm_args(
            a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS, use_tma=use_tma
        )
        moe_gemm.moe_grouped_gemm[(PROGS,)](*args, **meta, num_warps=8, num_stages=3)
        torch.cuda.synchronize()
        return check_slots(c, a, w, counts)

    def stale_rows_nan():
        """TMA loads whole row blocks: rows past a slot's count (NaN here) must not reach the
        stored rows."""
        poisoned = a.clone()
        for q, rows in enumerate(counts.tolist()):
            poisoned[q * CAPACITY + rows : (q + 1) * CAPACITY] = float("nan")
        c = fresh_c()
        args, meta = moe_fused.grouped_gemm_args(
            poisoned, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS, use_tma=True
        )
        moe_gemm.moe_grouped_gemm[(PROGS,)](*args, **meta, num_warps=8, num_stages=3)
        torch.cuda.synchronize()
        return check_slots(c, a, w, counts)

    res.run("grouped-gemm original (TMA)", lambda: original(True))
    res.run("grouped-gemm original (pointer loads)", lambda: original(False))
    res.run("grouped-gemm original (TMA), NaN rows past the counts", stale_rows_nan)
    kernel = moe_fused.transformed_kernel()
    tables = moe_fused.slot_tables(WORLD_SLOTS, EXPERTS, CAPACITY, BLOCK_M, tiles_n, rank % WORLD_SLOTS)
    slots = WORLD_SLOTS * EXPERTS

    def landed():
        c = fresh_c()
        args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
        signals = torch.ones(slots, dtype=torch.int32, device=device)
        launch(kernel, (PROGS,), tables, *args, signals=signals, epoch=1, wait_bound_ns=2_000_000_000, **meta)
        return check_slots(c, a, w, counts)

    res.run("grouped-gemm transformed, chunks landed", landed)

    def late():
        a_late = torch.full_like(a, float("nan"))
        counts_late = torch.full_like(counts, CAPACITY)  # last call's counts
        signals = torch.zeros(slots, dtype=torch.int32, device=device)
        ones = torch.ones(slots, dtype=torch.int32, device=device)
        c = fresh_c()
        args, meta = moe_fused.grouped_gemm_args(a_late, w, c, counts_late, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
        side = torch.cuda.Stream(device)
        torch.cuda._sleep(1000)  # load the sleep kernel before anything spins
        torch.cuda.synchronize()
        arrival = list(range(slots))
        random.Random(rank + 3).shuffle(arrival)
        main = torch.cuda.current_stream(device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for q in arrival:  # count, then rows, then the signal: copy engine, in stream order
                torch.cuda._sleep(2_000_000)
                counts_late[q : q + 1].copy_(counts[q : q + 1])
                a_late[q * CAPACITY : (q + 1) * CAPACITY].copy_(a[q * CAPACITY : (q + 1) * CAPACITY])
                signals[q : q + 1].copy_(ones[q : q + 1])
        launch(kernel, (PROGS,), tables, *args, signals=signals, epoch=1, wait_bound_ns=5_000_000_000, **meta)
        torch.cuda.synchronize()
        return check_slots(c, a, w, counts)

    res.run("grouped-gemm transformed, chunks landed late by a side stream", late)

    def withheld():
        q = 3
        signals = torch.ones(slots, dtype=torch.int32, device=device)
        signals[q] = 0
        c = fresh_c()
        args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
        chunk = tables.slot_chunks[q]
        # The kernel's wait is bounded (50 ms); the host's wait for the kernel is bounded too, so
        # a kernel that does not end is reported here instead of hanging the run.
        error = launch(
            kernel, (PROGS,), tables, *args, signals=signals, epoch=1, wait_bound_ns=50_000_000, sync=False, **meta
        )
        done = torch.cuda.Event()
        done.record()
        deadline = time.perf_counter() + 10.0
        while not done.query():
            if time.perf_counter() > deadline:
                # (reading the error record would wait for the kernel too)
                return False, "the kernel had not ended 10 s after its launch (its waits' bound is 50 ms)"
            time.sleep(0.001)
        try:
            check_error(error, tables, moe_fused.KERNEL)
        except WaitTimeoutError as exc:
            return f"chunk {chunk}" in str(exc), str(exc).splitlines()[0]
        return False, "no WaitTimeoutError"

    res.run("grouped-gemm withheld chunk named", withheld)


def run_fused(res, group_obj, calls):
    """mode="fused" (the plans' copy-engine / SM-copy chunks + the transformed grouped GEMMs)
    against mode="sequential" on the same routing: the dispatch (waiting GEMM), then the combine
    (notifying GEMM, slots sent home as their tiles finish, weighted sum) of act(h)."""
    from syncopate.ops.moe import MoeDispatchCombine

    rank, world, device = group_obj.rank, group_obj.world, group_obj.device
    experts, top_k, tokens, hidden, inter = 8, 2, 96, 256, 384
    local = experts // world
    group = group_obj.group if world > 1 else None
    wgen = torch.Generator().manual_seed(99)
    w_up = (torch.randn(experts, hidden, inter, generator=wgen) / hidden**0.5)[rank * local : (rank + 1) * local]
    w_up = w_up.to(device, torch.bfloat16).contiguous()
    w_down = (torch.randn(experts, inter, hidden, generator=wgen) / inter**0.5)[rank * local : (rank + 1) * local]
    w_down = w_down.to(device, torch.bfloat16).contiguous()
    from syncopate.ops.common import ranks_sharing_a_device

    shared = ranks_sharing_a_device(group, device)
    for backend in ("copy-engine", "sm-copy", "nccl"):
        if backend == "nccl" and shared is not None:
            # NCCL refuses two ranks on one GPU: this row runs at world 1 here (every chunk then
            # local, no NCCL call) and with ranks on their own GPUs.
            if rank == 0:
                print(f"SKIP fused backend=nccl world={world}: ranks {shared[0]} and {shared[1]} share GPU {shared[2]}")
            continue
        fused = MoeDispatchCombine(group, num_experts=experts, top_k=top_k, capacity=128, mode="fused", backend=backend)
        seq = MoeDispatchCombine(group, num_experts=experts, top_k=top_k, mode="sequential")
        res.start(f"fused dispatch + combine backend={backend}")
        worst, worst_y, detail, combine_ok, combine_detail, combine_error = 0.0, 0.0, "", False, "not reached", None
        try:
            for call in range(calls):
                gen = torch.Generator().manual_seed(7000 + 31 * call + rank)
                x = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
                ids, weights = skewed_routing(tokens, experts, top_k, gen, device)
                weights = weights.to(torch.bfloat16)
                h, layout = fused.dispatch_gemm(x, ids, w_up)
                h_ref, layout_ref = seq.dispatch_gemm(x, ids, w_up)
                if layout.recv_counts != layout_ref.recv_counts:
                    raise AssertionError(f"call {call}: recv_counts {layout.recv_counts} != {layout_ref.recv_counts}")
                worst = max(worst, rel_err(h, h_ref))
                if combine_error is None:
                    try:
                        y = fused.combine_gemm(torch.nn.functional.silu(h), w_down, layout, weights)
                        y_ref = seq.combine_gemm(torch.nn.functional.silu(h_ref), w_down, layout_ref, weights)
                        worst_y = max(worst_y, rel_err(y, y_ref))
                    except Exception as exc:
                        combine_error = f"call {call}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            fused.check()  # the last calls' waits (fused calls do not wait for their kernels)
            ok = worst < 2e-2 and fused.last_mode == "fused"
            detail = f"worst_rel_err={worst:.2e} rows={layout.rows_per_expert}"
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        if combine_error is None and fused.last_combine_mode is not None:
            combine_ok = worst_y < 2e-2 and fused.last_combine_mode == "fused"
            combine_detail = f"worst_rel_err={worst_y:.2e} mode={fused.last_combine_mode}"
        elif combine_error is not None:
            combine_detail = combine_error
        res.record(f"fused dispatch backend={backend} world={world} calls={calls}", ok, detail)
        res.record(f"fused combine backend={backend} world={world} calls={calls}", combine_ok, combine_detail)


def run_slots_path(res, group_obj, calls):
    """MoeDispatchCombine.dispatch_slots + combine_slots (ops/moe_slots.py) against the
    sequential layer on the same skewed routing, new routing each call, every call but the first
    (which builds the ops) under torch.cuda.set_sync_debug_mode("error"): any host
    synchronization in the slot path raises. Then a call routing more rows to expert 0 than its
    capacity, its combine and one good call after it: no error in any of them (the good one
    correct), ShapeError naming the expert and the rank at check(), once."""
    from syncopate.errors import ShapeError
    from syncopate.ops.common import ranks_sharing_a_device
    from syncopate.ops.moe import MoeDispatchCombine

    rank, world, device = group_obj.rank, group_obj.world, group_obj.device
    experts, top_k, tokens, hidden, inter, capacity = 8, 2, 96, 256, 384, 128
    local = experts // world
    group = group_obj.group if world > 1 else None
    wgen = torch.Generator().manual_seed(98)
    w_up = (torch.randn(experts, hidden, inter, generator=wgen) / hidden**0.5)[rank * local : (rank + 1) * local]
    w_up = w_up.to(device, torch.bfloat16).contiguous()
    w_down = (torch.randn(experts, inter, hidden, generator=wgen) / inter**0.5)[rank * local : (rank + 1) * local]
    w_down = w_down.to(device, torch.bfloat16).contiguous()
    shared = ranks_sharing_a_device(group, device)
    seq = MoeDispatchCombine(group, num_experts=experts, top_k=top_k, mode="sequential")
    for backend in ("copy-engine", "sm-copy", "nccl"):
        name = f"slots dispatch+combine backend={backend} world={world} calls={calls} no host sync"
        if backend == "nccl" and shared is not None:
            if rank == 0:
                print(f"SKIP {name}: ranks {shared[0]} and {shared[1]} share GPU {shared[2]} (NCCL refuses)")
            continue

        def case(backend=backend):
            layer = MoeDispatchCombine(group, num_experts=experts, top_k=top_k, capacity=capacity, backend=backend)

            def one_call(call):
                """(relative error, or a string saying what was wrong) of one good call."""
                gen = torch.Generator().manual_seed(9100 + 37 * call + rank)
                x = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
                ids, weights = skewed_routing(tokens, experts, top_k, gen, device)
                weights = weights.to(torch.bfloat16)
                torch.cuda.synchronize(device)
                if call > 0:
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    h_slots, lay = layer.dispatch_slots(x, ids, w_up)
                    y = layer.combine_slots(torch.nn.functional.silu(h_slots), w_down, lay, weights)
                finally:
                    torch.cuda.set_sync_debug_mode(0)
                h_ref, lay_ref = seq.dispatch_gemm(x, ids, w_up)
                y_ref = seq.combine_gemm(torch.nn.functional.silu(h_ref), w_down, lay_ref, weights)
                got = torch.tensor(lay_ref.recv_counts, dtype=torch.int32).reshape(-1).to(device)
                if not torch.equal(lay.recv_counts, got):
                    return f"call {call}: recv_counts {lay.recv_counts.tolist()} != {got.tolist()}"
                return rel_err(y, y_ref)

            worst = 0.0
            for call in range(calls):
                err = one_call(call)
                if isinstance(err, str):
                    return False, err
                worst = max(worst, err)
            layer.check()
            # Over capacity: 3 * capacity rows of this rank go to expert 0, the second choices
            # spread over experts 1 .. 7 (under capacity each). The call and its combine raise
            # nothing; nor does the next call, though the bad record has reached the host by then
            # (synchronized): only check() reports it, so no rank skips a call its peers make.
            many = 3 * capacity
            second = torch.arange(many, dtype=torch.int64) % (experts - 1) + 1
            ids = torch.stack([torch.zeros(many, dtype=torch.int64), second], 1)
            x = torch.randn(many, hidden, generator=torch.Generator().manual_seed(5)).to(device, torch.bfloat16)
            h_bad, lay_bad = layer.dispatch_slots(x, ids.to(device), w_up)
            ones = torch.full((many, top_k), 0.5, dtype=torch.bfloat16, device=device)
            layer.combine_slots(torch.nn.functional.silu(h_bad), w_down, lay_bad, ones)
            torch.cuda.synchronize(device)
            err = one_call(calls)  # correct for its own routing after the bad call
            if isinstance(err, str):
                return False, f"after the bad call: {err}"
            worst = max(worst, err)
            try:
                layer.check()
                return False, "rows over capacity were not reported"
            except ShapeError as exc:
                text = str(exc)
                named = f"rank {rank} routes {many} rows to expert 0 (on rank 0), over its capacity of {capacity}"
                if named not in text:
                    return False, f"the refusal does not name expert 0 and rank {rank}: {text}"
            layer.check()  # reported once; the ops' own waits of every call held
            return worst < 2e-2, f"worst_rel_err={worst:.2e} (a good call after the bad one included)"

        res.run(name, case)


def _slot_problem(world, experts, capacity, hidden, source):
    """Rank `source`'s send counts [W][E] (0 and a full slot included) and rows, the same on every
    rank (seeded by the source), so a receiver knows what each slot must hold."""
    gen = torch.Generator().manual_seed(500 + source)
    counts = torch.randint(0, capacity + 1, (world, experts), generator=gen)
    counts[source, 0], counts[(source + 1) % world, experts - 1] = 0, capacity
    counts = [[int(v) for v in row] for row in counts.tolist()]
    rows = torch.randn(sum(map(sum, counts)), hidden, generator=gen)
    return counts, rows


def run_slots_moved(res, group_obj):
    """MoeFusedDispatch alone, with x_recv poisoned (NaN) before the call: every slot (s, e) holds
    exactly the rows rank s sent for expert e, h their product; with SM-copy chunks (the copy
    kernel reads each count on the device) and with the local rows read in place, the rows past
    each count keep their NaN (nothing moved them). Cases: SM copy with and without the local
    rows in place, copy engine in place (its chunks move whole slots: rows past the count are
    not checked there, except the local slots at world 1)."""
    from syncopate.ops import moe_fused

    rank, world, device = group_obj.rank, group_obj.world, group_obj.device
    experts, capacity, hidden, n = 2, 128, 128, 128
    group = group_obj.group if world > 1 else None
    problems = [_slot_problem(world, experts, capacity, hidden, s) for s in range(world)]
    counts, rows = problems[rank]
    w = (torch.randn(experts, hidden, n, generator=torch.Generator().manual_seed(9)) / hidden**0.5).to(
        device, torch.bfloat16
    )
    for backend, in_place in (("sm-copy", True), ("sm-copy", False), ("copy-engine", True)):
        name = f"fused dispatch slots moved backend={backend} local_in_place={in_place} world={world}"
        res.start(name)
        try:
            op = moe_fused.MoeFusedDispatch(
                group,
                local_experts=experts,
                capacity=capacity,
                hidden=hidden,
                out_features=n,
                dtype=torch.bfloat16,
                device=device,
                backend=backend,
                local_in_place=in_place,
            )
            torch.cuda.synchronize()
            group_obj.barrier()
            op.x_recv.fill_(float("nan"))
            torch.cuda.synchronize()
            group_obj.barrier()  # no peer lands rows before every rank poisoned its own
            dest = moe_fused.sent_rows(counts, capacity, device)
            send = torch.tensor([v for row in counts for v in row], dtype=torch.int32, device=device)
            h = op(rows.to(device, torch.bfloat16), dest, send, w, moe_fused.local_rows(counts, rank))
            op.check()
            torch.cuda.synchronize()
            group_obj.barrier()
            ok, detail, moved, not_moved, worst = True, "", 0, 0, 0.0
            for s, (s_counts, s_rows) in enumerate(problems):
                first = sum(map(sum, s_counts[:rank]))  # where s's rows for this rank start
                for e in range(experts):
                    cnt = s_counts[rank][e]
                    want = s_rows[first : first + cnt].to(device, torch.bfloat16)
                    first += cnt
                    q = s * experts + e
                    slot = op.x_recv[q * capacity : (q + 1) * capacity]
                    if not torch.equal(slot[:cnt], want):
                        ok, detail = False, f"slot (source {s}, expert {e}): its {cnt} rows are not the sent ones"
                        break
                    untouched = torch.isnan(slot[cnt:].float()).all()
                    counted = backend == "sm-copy" or (in_place and s == rank)
                    if counted and not untouched:
                        ok, detail = False, f"slot (source {s}, expert {e}): rows past its count {cnt} were written"
                        break
                    moved, not_moved = moved + cnt, not_moved + capacity - cnt
                    if cnt:
                        got = h[q * capacity : q * capacity + cnt].float()
                        worst = max(worst, rel_err(got, want.float() @ w[e].float()))
                if not ok:
                    break
            if ok:
                ok = worst < 2e-2
                detail = f"rows moved={moved} rows past the counts={not_moved} worst_rel_err={worst:.2e}"
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        group_obj.barrier()
        res.record(name, ok, detail)


def run_withheld_plan_chunk(res, group_obj):
    """The fused dispatch with one rows chunk of its plan never issued (the runtime's drop_chunk
    hook): chunk (rank 0 -> rank W-1, expert 1). Rank W-1's tiles of that slot time out and its
    check() raises WaitTimeoutError naming the chunk; no rank hangs (the host waits for the
    kernel at most 10 s)."""
    from syncopate.errors import WaitTimeoutError
    from syncopate.ops import moe_fused

    rank, world, device = group_obj.rank, group_obj.world, group_obj.device
    experts, capacity, hidden, n, rows_per_slot = 2, 128, 128, 128, 5
    chunk = moe_fused.rows_chunk_id(world, experts, 0, world - 1, 1)
    group = group_obj.group if world > 1 else None
    res.start(f"fused dispatch withheld plan chunk {chunk} world={world}")
    # Every rank starts the call together, and the bound leaves room for 4 ranks time-slicing one
    # GPU: with 200 ms and no barrier, a rank still loading its kernel entered late and its peers'
    # waits for its entry timed out too (shared world 4, nvidia-h100-x1, 2026-11-25).
    try:
        op = moe_fused.MoeFusedDispatch(
            group,
            local_experts=experts,
            capacity=capacity,
            hidden=hidden,
            out_features=n,
            dtype=torch.bfloat16,
            device=device,
            backend="sm-copy",
            wait_bound_ns=2_000_000_000,
            drop_chunk=chunk,
        )
        slots = world * experts
        rows = torch.randn(slots * rows_per_slot, hidden, device=device).to(torch.bfloat16)
        dest = torch.tensor(
            [q * capacity + i for q in range(slots) for i in range(rows_per_slot)], device=device, dtype=torch.long
        )
        send_counts = torch.full((slots,), rows_per_slot, dtype=torch.int32, device=device)
        w = torch.randn(experts, hidden, n, device=device).to(torch.bfloat16)
        torch.cuda.synchronize()
        group_obj.barrier()
        op(rows, dest, send_counts, w, (rank * experts * rows_per_slot, (rank + 1) * experts * rows_per_slot))
        done = torch.cuda.Event()
        done.record()
        deadline = time.perf_counter() + 10.0
        while not done.query():
            if time.perf_counter() > deadline:
                raise AssertionError("the call had not ended 10 s after it started (its waits' bound is 2 s)")
            time.sleep(0.001)
        try:
            op.check()
            error = None
        except WaitTimeoutError as exc:
            error = str(exc).splitlines()[0]
        if rank == world - 1:
            ok = error is not None and f"chunk {chunk}" in error
            detail = error or "no WaitTimeoutError"
        else:  # a rank the chunk is not for sees nothing missing
            ok, detail = error is None, error or "no timeout (the chunk was not for this rank)"
    except Exception as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    group_obj.barrier()
    res.record(f"fused dispatch withheld plan chunk {chunk} world={world}", ok, detail)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--results-file", default="")
    parser.add_argument("--case-limit-s", type=float, default=20.0, help="dump every stack when a case runs longer")
    args = parser.parse_args()
    from gpu_group import GpuGroup

    group_obj = GpuGroup()
    rank, world = group_obj.rank, group_obj.world
    log = open(f"{args.results_file}.rank{rank}", "w") if args.results_file else None
    res = Results(rank, log, args.case_limit_s)
    if rank == 0:
        print(f"== mode: {group_obj.mode}", flush=True)
    start = time.perf_counter()
    # The single-call cases first, then the fused ops: a run cut off by its time limit still
    # reports them.
    run_slots_moved(res, group_obj)
    group_obj.barrier()
    run_withheld_plan_chunk(res, group_obj)
    group_obj.barrier()
    run_slots_path(res, group_obj, args.calls)
    group_obj.barrier()
    run_fused(res, group_obj, args.calls)
    group_obj.barrier()
    try:
        run_sequential(res, group_obj, args.calls)
    except Exception as exc:
        res.record("sequential", False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    group_obj.barrier()
    run_grouped_gemm(res, group_obj.device, rank)
    group_obj.barrier()
    line = f"SUMMARY world={world} passed={res.passed} failed={res.failed} seconds={time.perf_counter() - start:.1f}"
    print(line if rank == 0 else f"{line} rank={rank}", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
