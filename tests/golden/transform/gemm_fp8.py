"""The FP8 local GEMM: bf16 C = (A_e4m3 @ B_e4m3) * scale_a * scale_b, fp32 accumulation.

The persistent TMA loop of kernels/gemm.py (`gemm_tma_kernel`: grouped tile order, flattened
tile loop, tensor descriptors made on the device) with e4m3 operands and a scaling epilogue,
built from gemm.py's helpers (prologue, K loop, C store). It carries the same `# @sy.`
annotations, so the transformer turns it into the fused FP8 ops (docs/ANNOTATIONS.md): the tile
block, the consume of A before the K loop, the produce of C on the imported `store_c_tile`
(the transformer reads imported helpers from their module: "Helpers" there).

Scales are fp32 vectors read with a stride: scale_a[row * stride_sa], scale_b[col * stride_sb].
A stride of 0 is a per-tensor scale (one element); 1 is per-row (A, M elements) / per-column
(B, N elements). The stride also lets A's row scales live inside a packed row of the gathered
tensor (AG+GEMM moves them with A's rows in the same chunks: ops/fp8.py), so the wait for A's
rows covers them. The scales multiply the fp32 accumulator once per tile, after the K loop:
(sum_k a_ik b_kj) * sa_i * sb_j, exactly the dequantised product with per-row/column scales.

Why a second kernel and not a constexpr of gemm_tma_kernel: the scale arguments would change
the signature every fused bf16 launch binds; the loop is shared through the same helpers.
Runs under TRITON_INTERPRET=1 (tests/python/test_gemm_fp8_interpret.py: the interpreter computes
e4m3 tl.dot exactly after widening, checked against an fp32 reference).
"""

from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl

from .configs import INTERPRETER_CONFIG, GemmConfig, choose_fp8_config
from triton.tools.tensor_descriptor import TensorDescriptor

from .gemm import (device_limits, ensure_descriptor_allocator, grouped_tile, grouped_tma_tile, interpreter_active,
                   result_tensor, store_c_tile, tile_grid, tma_compatible, tma_gemm_prologue,
                   tma_k_loop, tma_store_tile)
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "gemm_fp8_tma_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error"], "accesses": [{"tensor": "a", "param": "a_ptr", "role": "consume", "m_dim": 0, "n_dim": -1}, {"tensor": "c", "param": "c_ptr", "role": "produce", "m_dim": 0, "n_dim": 1}]}  # [syncopate]

FP8_DTYPE = torch.float8_e4m3fn
OUT_DTYPE = torch.bfloat16
# FP8 tensor-core instructions: sm_89 (Ada) and sm_90 (Hopper) onwards.
MIN_FP8_CAPABILITY = (8, 9)


@triton.jit
def _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc * scale_a[rows] (column vector) * scale_b[cols] (row vector); stride 0: one scale."""
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    sa = tl.load(scale_a_ptr + rows.to(tl.int64) * stride_sa, mask=rows < M, other=0.0)
    sb = tl.load(scale_b_ptr + cols * stride_sb, mask=cols < N, other=0.0)
    return acc * sa[:, None] * sb[None, :]


@triton.jit
def gemm_fp8_tma_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_am, stride_b,
                        stride_cm, stride_sa, stride_sb, num_programs, B_IS_NK: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr,
                        WARP_SPECIALIZE: tl.constexpr,
                        sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]
                        FLATTEN: tl.constexpr = True,
                        C_STORE_POINTERS: tl.constexpr = False):
    """C[M,N] (bf16) = (A[M,K] @ B) * scale_a * scale_b, A and B e4m3, B stored [K,N] or, with
    B_IS_NK, [N,K] (a Linear weight; the layout Hopper's FP8 tensor cores read natively)."""
    a_desc, b_desc, c_desc, num_pid_m, num_pid_n, num_tiles, k_tiles = tma_gemm_prologue(
        a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K, EPILOGUE_SPLIT)
    sy_tile_next = syl.tile_at_or(sy_tile_order, tl.program_id(0), num_tiles, num_programs)  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_epoch_now = syl.epoch_of(sy_epoch)  # [syncopate]
    sy_wait_begin_next, sy_wait_end_next = syl.wait_row(sy_wait_offsets, sy_tile_next)  # [syncopate]
    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        # @sy.tile(index=tile_id, m=pid_m, n=pid_n)
        # [syncopate] was: pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        sy_tile = sy_tile_next  # [syncopate]
        sy_wait_begin, sy_wait_end = sy_wait_begin_next, sy_wait_end_next  # [syncopate]
        sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)  # [syncopate]
        sy_tile_next = syl.tile_at_or(sy_tile_order, tile_id + (num_programs), num_tiles, num_programs)  # [syncopate]
        sy_tile, sy_seen = syl.wait_for_tile_row(sy_signals, sy_wait_slots, sy_slot_writers, sy_tile, sy_wait_begin, sy_wait_end, sy_epoch_now, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
        sy_wait_begin_next, sy_wait_end_next = syl.wait_row(sy_wait_offsets, sy_tile_next)  # [syncopate]
        pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
        # @sy.end
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        # @sy.consume(a_ptr, m=pid_m)
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, B_IS_NK, BLOCK_M, BLOCK_N, BLOCK_K)
        acc = _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                          BLOCK_M, BLOCK_N)
        # @sy.produce(c_ptr, m=pid_m, n=pid_n)
        store_c_tile(acc.to(c_ptr.dtype.element_ty), c_desc, c_ptr, off_m, off_n, M, N, stride_cm, BLOCK_M, BLOCK_N,
                     EPILOGUE_SPLIT, C_STORE_POINTERS)
        syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)  # [syncopate]
        syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)  # [syncopate]


@triton.jit
def gemm_fp8_tma_host_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, stride_sa,
                             stride_sb, num_programs, B_IS_NK: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                             EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr = True):
    """gemm_fp8_tma_kernel with the TMA descriptors of A, B and C made on the host: what a plain
    `gemm_fp8` call runs on a GPU. The same reason as gemm.py's gemm_tma_host_kernel: descriptors
    made in the kernel cost every program a global-memory write and a fence before its first
    load (1-2.4 us per launch measured for bf16 on nvidia-h200), which a 10-30 us small-M FP8
    GEMM feels. Not annotated: the fused FP8 ops are transformed from gemm_fp8_tma_kernel."""
    num_pid_m, num_pid_n, num_tiles, k_tiles = tile_grid(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN):
        acc, off_m, off_n = grouped_tma_tile(a_desc, b_desc, tile_id, num_pid_m, num_pid_n, k_tiles, B_IS_NK,
                                             BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
        acc = _scale_tile(acc, scale_a_ptr, stride_sa, scale_b_ptr, stride_sb, off_m, off_n, M, N,
                          BLOCK_M, BLOCK_N)
        tma_store_tile(c_desc, acc.to(c_desc.dtype), off_m, off_n, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)


def scale_stride(scale: torch.Tensor, length: int, operand: str, per: str) -> int:
    """The element stride of a scale vector: 0 for a per-tensor scale (one element), its own
    stride for `length` scales (one per row of A / column of B). ValueError naming the operand,
    the shapes accepted and the shape given otherwise."""
    if scale.dtype != torch.float32:
        raise TypeError(f"gemm_fp8: scale_{operand} must be float32, got {scale.dtype}")
    if scale.numel() == 1:
        return 0
    shapes_ok = {(length,), (length, 1)} if operand == "a" else {(length,), (1, length)}
    if tuple(scale.shape) not in shapes_ok:
        raise ValueError(f"gemm_fp8: scale_{operand} must have 1 element (per tensor) or {length} "
                         f"(one per {per}: shape {sorted(shapes_ok)}), got shape "
                         f"{list(scale.shape)}")
    return scale.stride(0) if scale.dim() == 1 or operand == "a" else scale.stride(1)


def check_fp8_capability(device: torch.device, who: str = "gemm_fp8") -> None:
    """Refuses a CUDA device whose tensor cores have no FP8 (compute capability < 8.9)."""
    if device.type != "cuda":
        return
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) < MIN_FP8_CAPABILITY:
        raise ValueError(f"{who}: {torch.cuda.get_device_name(device)} (compute capability "
                         f"{cap[0]}.{cap[1]}) has no FP8 tensor cores; FP8 needs 8.9 (Ada) or 9.0 "
                         "(Hopper) and later")


def check_fp8_operands(a, b, scale_a, scale_b) -> tuple[int, int]:
    """Checks the operands and scales; returns the scale strides (stride_sa, stride_sb)."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemm_fp8: A and B must be 2-D, got A{tuple(a.shape)} B{tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm_fp8: inner dimensions differ: A is {tuple(a.shape)}, B is "
                         f"{tuple(b.shape)}")
    if a.dtype != FP8_DTYPE or b.dtype != FP8_DTYPE:
        raise TypeError(f"gemm_fp8: A and B must both be {FP8_DTYPE}, got {a.dtype} and {b.dtype}")
    if scale_a is None or scale_b is None:
        missing = " and ".join(n for n, s in (("scale_a", scale_a), ("scale_b", scale_b)) if s is None)
        raise ValueError(f"gemm_fp8: FP8 operands need their scales: {missing} not given (a "
                         "float32 tensor of 1 element, or one per row of A / column of B)")
    if any(t.device != a.device for t in (b, scale_a, scale_b)):
        raise ValueError("gemm_fp8: A, B and both scales must be on one device")
    if not a.is_cuda and not interpreter_active():
        raise ValueError(f"gemm_fp8: tensors are on {a.device}; the kernel needs a CUDA device "
                         "(or TRITON_INTERPRET=1 for the CPU interpreter)")
    check_fp8_capability(a.device)
    return (scale_stride(scale_a, a.shape[0], "a", "row of A"),
            scale_stride(scale_b, b.shape[1], "b", "column of B"))


class KMajorCopies:
    """K-major ([N, K]) copies of FP8 B operands stored [K, N], one per tensor and version.

    Hopper's FP8 tensor-core instruction (wgmma) reads both operands K-major. Given a B tile in
    [K, N] order, Triton 3.6 loads it from shared memory into registers and stores it back
    transposed before every MMA, synchronously (a local_load / local_alloc pair and a wgmma wait
    of 0 in the TTGIR, checked for sm_90): 5-13x the time of the [N, K] layout on H200
    (docs/PERFORMANCE.md). A B stored [K, N] is a weight in practice, read by every call until
    it changes, so its transpose is made once and kept: per tensor (held by a weak reference,
    dropped when the tensor is), refreshed when the tensor's version counter (bumped by every
    in-place write, views included) moves. Costs the memory of one more copy per such weight;
    storing FP8 weights [N, K] (nn.Linear's layout) avoids it. Never cached while a CUDA graph
    is being captured (the copy would live in the graph's pool): a capture after the first
    eager call finds the copy made.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple, tuple] = {}

    def get(self, b: torch.Tensor) -> torch.Tensor:
        """B ([K, N], last dim contiguous) as a contiguous [N, K] tensor with the same values."""
        owner = b._base if b._base is not None else b
        key = (b.data_ptr(), tuple(b.shape), tuple(b.stride()), b.device)
        entry = self._entries.get(key)
        if entry is not None:
            ref, version, copy = entry
            if ref() is owner and version == b._version:
                return copy
        copy = b.t().contiguous()
        capturing = b.is_cuda and torch.cuda.is_current_stream_capturing()
        if not capturing:
            self._entries[key] = (weakref.ref(owner, lambda ref, key=key: self._drop(key, ref)), b._version, copy)
        return copy

    def _drop(self, key: tuple, ref: weakref.ref) -> None:
        # Only the entry of the tensor that died (another may hold the key since).
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# The process's K-major copies (one per [K, N] FP8 weight in use).
k_major_copies = KMajorCopies()


def select_fp8_config(m: int, n: int, k: int, device: torch.device, local: bool = False) -> GemmConfig:
    """The block configuration for an FP8 GEMM on this device (configs.choose_fp8_config: the
    bf16 model's choice with BLOCK_K doubled up to 128). local=True: the plain gemm_fp8 call's
    choice, which may split K in one launch; the fused FP8 ops take the unsplit one."""
    if device.type != "cuda":
        return INTERPRETER_CONFIG
    num_sms, smem = device_limits(device)
    # Triton itself keeps a little shared memory (barriers); leave it a margin.
    return choose_fp8_config(m, n, k, num_sms, smem - 1024, local=local)


def gemm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
             out: torch.Tensor | None = None, config: GemmConfig | None = None,
             num_programs: int | None = None, c_store_pointers: bool = False,
             k_major_b: bool = True, host_descriptors: bool | None = None) -> torch.Tensor:
    """bf16 C = (A @ B) * scale_a * scale_b for e4m3 A [M, K] and B [K, N] (a weight stored
    [N, K] is passed as `W.t()`, read in place), fp32 accumulation; like torch._scaled_mm.

    scale_a: float32, 1 element (per tensor) or M (per row, shape [M] or [M, 1]);
    scale_b: 1 element or N (per column, shape [N] or [1, N]).
    A B stored [K, N] is read through a kept K-major copy (KMajorCopies); k_major_b=False reads
    it in place instead (the slow in-kernel transpose, kept for measuring it).
    `host_descriptors`: TMA descriptors made on the host (gemm_fp8_tma_host_kernel; the default
    on a GPU unless c_store_pointers) or in the kernel (gemm_fp8_tma_kernel, the annotated one).
    """
    stride_sa, stride_sb = check_fp8_operands(a, b, scale_a, scale_b)
    m, k = a.shape
    n = b.shape[1]
    out = result_tensor(out, m, n, OUT_DTYPE, a.device, "gemm_fp8")
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    cfg = config if config is not None else select_fp8_config(m, n, k, a.device, local=not c_store_pointers)
    one_launch = cfg.stream_k or (cfg.split_k > 1 and cfg.split_fixup)
    if cfg.split_k > 1 and not cfg.split_fixup and not cfg.block_n2:
        raise ValueError(f"gemm_fp8: config {cfg.name} splits K in two launches; FP8 splits K in two "
                         "launches only with wide tiles (block_n2), else in one launch (split_fixup)")
    a_view = a if a.stride(1) == 1 else a.contiguous()
    # B as the [N, K] tensor the FP8 MMA reads: a transposed view of one in place, else the
    # kept K-major copy (KMajorCopies: the [K, N] path is several times slower).
    b_is_nk = b.stride(1) != 1 and b.stride(0) == 1
    if b_is_nk:
        b_view = b.t()
    elif k_major_b:
        b_view, b_is_nk = k_major_copies.get(b), True
    else:
        b_view = b if b.stride(1) == 1 else b.contiguous()
    for name, t in (("A", a_view), ("B", b_view), ("C", out)):
        if not tma_compatible(t):
            raise ValueError(f"gemm_fp8: TMA cannot describe {name} {tuple(t.shape)} with strides "
                             f"{t.stride()} (row pitch and base must be multiples of 16 bytes)")
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.width)
    if num_programs is None:
        num_programs = device_limits(a.device)[0] if a.is_cuda else 4
    grid_size = max(1, min(num_programs, tiles))
    if host_descriptors is None:
        host_descriptors = a.is_cuda and not interpreter_active()
    if cfg.block_n2 and not c_store_pointers:
        from .gemm_wide import wide_gemm

        wide_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs, scales=(scale_a, scale_b, stride_sa, stride_sb))
        return out
    if one_launch and not c_store_pointers:
        from .gemm import _counters
        from .gemm_one_launch import one_launch_gemm

        one_launch_gemm(a_view, b_view, out, b_is_nk, cfg, num_programs, lambda tiles: _counters(a.device, tiles),
                        scales=(scale_a, scale_b, stride_sa, stride_sb))
        return out
    if host_descriptors and not c_store_pointers:
        a_desc = TensorDescriptor.from_tensor(a_view, [cfg.block_m, cfg.block_k])
        b_desc = TensorDescriptor.from_tensor(
            b_view, [cfg.block_n, cfg.block_k] if b_is_nk else [cfg.block_k, cfg.block_n])
        c_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
        gemm_fp8_tma_host_kernel[(grid_size,)](
            a_desc, b_desc, c_desc, scale_a, scale_b, m, n, k, stride_sa, stride_sb, grid_size,
            B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            GROUP_M=cfg.group_m, EPILOGUE_SPLIT=cfg.epilogue_split, FLATTEN=cfg.flatten,
            num_stages=cfg.num_stages, num_warps=cfg.num_warps)
        return out
    if a.is_cuda:
        ensure_descriptor_allocator()
    gemm_fp8_tma_kernel[(grid_size,)](
        a_view, b_view, out, scale_a, scale_b, m, n, k, a_view.stride(0), b_view.stride(0),
        out.stride(0), stride_sa, stride_sb, grid_size, B_IS_NK=b_is_nk, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EPILOGUE_SPLIT=cfg.epilogue_split, WARP_SPECIALIZE=cfg.warp_specialize,
        FLATTEN=cfg.flatten, C_STORE_POINTERS=c_store_pointers, num_stages=cfg.num_stages,
        num_warps=cfg.num_warps)
    return out
