"""FP8 (e4m3) operands in the fused ops: the checks, the scales and the gathered row layout.

    op = AgGemm(group, m=M, k=K, n=N, dtype=torch.float8_e4m3fn)
    c = op(a_shard, b, scale_a=sa, scale_b=sb)          # c: bf16 [M, N]
    op = GemmRs(group, m=M, k=K_local, n=N, dtype=torch.float8_e4m3fn)
    out = op(a, b_shard, scale_a=sa, scale_b=sb)        # out: bf16, reduced in bf16

What FP8 changes (kernels/gemm_fp8.py is the local kernel, transformed like the bf16 one):
- scale_a: float32, one element (per tensor) or one per row of this rank's A ([rows] or
  [rows, 1]); scale_b: one element or one per column of B ([N] or [1, N]). Missing scales, a
  wrong dtype or shape, and a GPU without FP8 (compute capability < 8.9) are refused by name.
- AG+GEMM gathers A's rows *with their scales*: each gathered row is K bytes of e4m3 followed by
  its fp32 scale, padded to K + 16 bytes (every row pitch stays a multiple of 16 bytes, as TMA
  wants). The plan's tensor "a" is [M, K + 16] e4m3, so its chunks carry the scales of exactly
  the rows they carry, and a tile's wait for its rows covers their scales (read in the
  epilogue). A per-tensor scale of a shard is written into each of its rows: shards may come
  with different scales. The chunks move 1 byte per element (plus 16 per row).
- GEMM+RS / GEMM+AR: the GEMM reads FP8 A and B, its C is bf16; the partials travel and are
  reduced in bf16 (the reduce-add chunks of the bf16 ops). The staged epilogue
  (reduce="epilogue") has no FP8 kernel and is refused by name.
- The kernel's scale strides are fixed per context (a different stride would compile another
  kernel variant during a call): scales are copied into context buffers each call (a per-tensor
  scale is broadcast), one float per row / column.
"""

from __future__ import annotations

import torch

from syncopate.errors import ShapeError, UserError

FP8 = torch.float8_e4m3fn
OUT_DTYPE = torch.bfloat16
# Bytes after each gathered row's K bytes of A: its fp32 scale, then padding to 16 bytes.
ROW_TAIL_BYTES = 16


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype == FP8


def output_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of an op's result: bf16 for FP8 operands, else the operands'."""
    return OUT_DTYPE if is_fp8(dtype) else dtype


def check_fp8_context(who: str, device: torch.device, k: int, n: int) -> None:
    """An FP8 context's construction checks: a GPU with FP8, and row pitches TMA can describe."""
    from syncopate.kernels.gemm_fp8 import check_fp8_capability

    try:
        check_fp8_capability(device, who)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if k % 16 != 0 or n % 16 != 0:
        raise ShapeError(
            f"{who}: FP8 needs k and n multiples of 16 (A's rows are k bytes, B's k or n bytes), "
            f"for 16-byte row pitches; got k={k}, n={n}"
        )


def check_scale(who: str, name: str, scale, length: int, what: str, shapes: tuple, device) -> torch.Tensor:
    """`scale` as a flat float32 view of 1 or `length` elements; UserError/ShapeError naming
    `name`, what it scales and the shapes accepted otherwise."""
    if scale is None:
        raise UserError(
            f"{who}: FP8 operands need {name} (float32: one element per tensor, or one per {what}); it was not given"
        )
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise UserError(f"{who}: {name} must be a float32 tensor, got {got}")
    if scale.device != device:
        raise UserError(f"{who}: {name} must be on {device}, got {scale.device}")
    if scale.numel() == 1:
        return scale.reshape(1)
    if tuple(scale.shape) not in shapes:
        raise ShapeError(
            f"{who}: {name} must have 1 element (per tensor) or {length} (one per {what}: "
            f"shape {' or '.join(str(list(s)) for s in shapes)}), got shape {list(scale.shape)}"
        )
    return scale.reshape(length)


def check_scales(who: str, scale_a, scale_b, rows: int, n: int, device):
    """(scale_a, scale_b) as flat float32 views of 1 or rows / n elements."""
    sa = check_scale(who, "scale_a", scale_a, rows, "row of A", ((rows,), (rows, 1)), device)
    sb = check_scale(who, "scale_b", scale_b, n, "column of B", ((n,), (1, n)), device)
    return sa, sb


def refuse_scales(who: str, dtype: torch.dtype, scale_a, scale_b) -> None:
    """Scales given to a context whose operands are not FP8: refused (they would be ignored)."""
    if scale_a is not None or scale_b is not None:
        raise UserError(f"{who}: scale_a / scale_b are for FP8 operands; this context's dtype is {dtype}")


def packed_views(packed: torch.Tensor, k: int):
    """(A [rows, k] e4m3, scales [rows, 1] float32) of gathered rows laid out as k bytes of A, then
    the row's fp32 scale, then padding (packed: [rows, k + ROW_TAIL_BYTES] e4m3)."""
    a = packed[:, :k]
    scales = packed[:, k : k + 4].view(torch.float32)
    return a, scales


def pack_rows(packed: torch.Tensor, a: torch.Tensor, scale: torch.Tensor) -> None:
    """Writes A's rows and their scales (1 element: broadcast) into `packed` (see packed_views)."""
    a_view, s_view = packed_views(packed, a.shape[1])
    a_view.copy_(a)
    s_view.copy_(scale.reshape(-1, 1).expand(a.shape[0], 1))
