"""The fused GEMM every op launches: kernels/gemm.py's local GEMM rewritten by the transformer.

`gemm_tma_kernel` (persistent, TMA descriptors, per-shape configs: the GEMM that is within 5%
of cuBLAS) is the kernel the ops run. `gemm_pointer_kernel` is rewritten and used only when TMA
cannot describe an operand (a row pitch that is not a multiple of 16 bytes). Each is transformed
once per process. A transformer failure raises (TransformError / InternalError naming the kernel
and the cause): there is no hand-written substitute.

`FusedGemm` binds one rank's tile tables, grid and compile-time configuration once, so a call
only passes its operands and launches (no allocation, no synchronisation, no table rebuild; the
epoch is read by the kernel from the workspace's device epoch word).
`StagedReduceGemm` (ops/staged_gemm.py) is the same for kernels/gemm_reduce.py's
`gemm_reduce_kernel`, the GEMM+RS whose epilogue adds the staged partials.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import tempfile

from typing import Optional, Tuple

import torch

from syncopate.errors import Error, InternalError, TransformError
from syncopate.launch import TileTables, unspecialize, check_error, epoch_word, new_error_record, transformed_info
from syncopate.ops.common import leading_stride_aligned, reserved_sms

TMA_KERNEL = "gemm_tma_kernel"
POINTER_KERNEL = "gemm_pointer_kernel"
FP8_KERNEL = "gemm_fp8_tma_kernel"
FP8_MODULE = "syncopate.kernels.gemm_fp8"


GEMM_MODULE = "syncopate.kernels.gemm"


def _gemm_module(module_name: str = GEMM_MODULE):
    # importlib: the package syncopate.kernels re-exports a function named gemm over the module
    return importlib.import_module(module_name)


@functools.lru_cache(maxsize=None)
def transformed_kernel(kernel_name: str, module_name: str = GEMM_MODULE):
    """`kernel_name` of the kernels module `module_name` (default kernels/gemm.py) as the
    transformer rewrites it (made once per process)."""
    from syncopate import _core

    path = _gemm_module(module_name).__file__
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        result = _core.transform(source, path, kernel_name)
    except TransformError as exc:
        raise TransformError(f"syncopate.ops: the transformer rejected {kernel_name} of {path}: {exc}") from exc
    except Error as exc:
        raise InternalError(
            f"syncopate.ops: transforming {kernel_name} of {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    text = getattr(result, "source", None)
    if not isinstance(text, str) or not any(
        f"syl.{name}(" in text for name in ("wait_tile", "wait_for_tile", "notify_tile", "notify_tile_row")
    ):
        raise InternalError(
            f"syncopate.ops: the transformer's output for {kernel_name} of {path} has no "
            "waits and no notifies (expected syl.wait_tile, syl.wait_for_tile, syl.notify_tile or syl.notify_tile_row): "
            "the kernel's "
            "annotations did not apply"
        )
    # Triton reads a kernel's source through inspect, so the module needs a real file; named
    # inside syncopate.kernels so that gemm.py's relative imports resolve.
    out_path = os.path.join(tempfile.mkdtemp(prefix="syncopate-"), f"{kernel_name}_fused.py")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    name = f"syncopate.kernels._{kernel_name}_fused"
    try:
        spec = importlib.util.spec_from_file_location(name, out_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        kernel = getattr(module, kernel_name)
        transformed_info(kernel)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bug of ours
        sys.modules.pop(name, None)
        raise InternalError(
            f"syncopate.ops: the transformed {kernel_name} ({out_path}) does not load: {type(exc).__name__}: {exc}"
        ) from exc
    unspecialize(kernel)
    return kernel


def fused_config(config, capability: Optional[Tuple[int, int]] = None):
    """The local GEMM's config as the fused kernel can use it, on a GPU of compute capability
    `capability` (None: sm_90, what the compile checks target).

    Triton 3.6 cannot warp-specialise the transformed TMA loop with 4 warps: its
    NVGPUWarpSpecialization pass stops in TaskIdPropagation ("Other parent ops are not
    supported", the bounded spin loop of a wait inside the partitioned loop). With 8 warps it
    compiles on sm_90; on sm_100 it fails whatever the warps (tests/python/test_transform_loops.py
    pins both). So the fused kernel runs without warp specialisation there; the sm_90 compile
    check (tests/python/compile_fused_kernels.py) covers every candidate.
    """
    blackwell_or_later = capability is not None and capability[0] >= 10
    if config.warp_specialize and (config.num_warps < 8 or blackwell_or_later):
        return dataclasses.replace(config, warp_specialize=False)
    return config


def device_capability(device: torch.device) -> Optional[Tuple[int, int]]:
    """(major, minor) of a CUDA device; None on the CPU (the interpreter)."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def tma_describable(m: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether TMA can describe A [m, k], B (either layout) and C [m, n] (contiguous,
    16-byte aligned bases, which the contexts check): every row pitch a multiple of 16 bytes."""
    return all(leading_stride_aligned(x, dtype) for x in (k, n))


def num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


class FusedGemm:
    """One rank's fused GEMM C = A @ B for fixed shapes, layout, plan and tile order.

    producer: the GEMM's C feeds a collective (GEMM+RS/AR): C is stored with plain stores so
    that each tile's notify follows a completed store (a TMA store is asynchronous).
    """

    def __init__(
        self,
        *,
        plan,
        rank: int,
        m: int,
        n: int,
        k: int,
        dtype: torch.dtype,
        b_layout: str,
        config,
        accesses,
        tile_order: str,
        device: torch.device,
        backend: str,
        wait_bound_ns: int,
        producer: bool,
        num_programs: int,
    ):
        self.use_tma = tma_describable(m, n, k, dtype)
        self.kernel_name = TMA_KERNEL if self.use_tma else POINTER_KERNEL
        self.kernel = transformed_kernel(self.kernel_name)
        self._bind(
            plan=plan,
            rank=rank,
            m=m,
            n=n,
            b_layout=b_layout,
            config=config,
            accesses=accesses,
            tile_order=tile_order,
            device=device,
            wait_bound_ns=wait_bound_ns,
            num_programs=num_programs,
        )
        cfg = config
        if self.use_tma:
            self.kwargs.update(
                B_IS_NK=self.b_is_nk,
                EPILOGUE_SPLIT=cfg.epilogue_split,
                WARP_SPECIALIZE=cfg.warp_specialize,
                FLATTEN=cfg.flatten,
                C_STORE_POINTERS=bool(producer),
            )
            b_pitch = k if self.b_is_nk else n
            self.scalars = (m, n, k, k, b_pitch, n, self.num_programs)
        else:
            # B's strides as the [K, N] operand: (N, 1) row-major, (1, K) for a Linear weight.
            sbk, sbn = (1, k) if self.b_is_nk else (n, 1)
            self.scalars = (m, n, k, k, 1, sbk, sbn, n, 1, self.num_programs)
        self._finish_binding()

    def _bind(
        self, *, plan, rank, m, n, b_layout, config, accesses, tile_order, device, wait_bound_ns, num_programs
    ) -> None:
        """Lowers the plan for this rank, orders its tiles and binds everything but the operands,
        the signals and the epoch word. accesses: (tensor,
        role, m_dim, n_dim[, m_local_shard]) tuples, as sy.TileAccess takes them."""
        import syncopate as sy

        self.config = config
        self.b_is_nk = b_layout == "nk"
        grid = sy.TileGrid(m, n, config.block_m, config.block_n)
        tables = sy.lower(plan, grid, [sy.TileAccess(*access) for access in accesses])
        order = sy.tile_order(plan, tables[rank], grid, tile_order, group_m=config.group_m)
        self.tables = TileTables.from_signal_table(tables[rank], order, grid.tiles_n)
        self.num_programs = max(1, min(self.tables.num_tiles, int(num_programs)))
        self.device = device
        self.error = new_error_record(device)
        # The record's flag word, copied to pinned host memory at the end of each call
        # (copy_flag_to_host), so that the next call can look without synchronizing. Under the
        # interpreter the record itself is host memory.
        self.flag_on_host = _host_flag() if device.type == "cuda" else None
        self.wait_bound_ns = int(wait_bound_ns)
        self.kwargs = dict(self.tables.device_arrays(device))
        self.kwargs.update(
            sy_tiles_n=self.tables.tiles_n,
            sy_wait_bound_ns=self.wait_bound_ns,
            sy_rank=self.tables.rank,
            sy_error=self.error,
        )
        self.kwargs.update(
            BLOCK_M=config.block_m,
            BLOCK_N=config.block_n,
            BLOCK_K=config.block_k,
            GROUP_M=config.group_m,
            num_stages=config.num_stages,
            num_warps=config.num_warps,
        )

    def _finish_binding(self) -> None:
        self.grid = (self.num_programs,)
        info = transformed_info(self.kernel)
        missing = [p for p in info["params"] if p not in self.kwargs and p not in ("sy_signals", "sy_epoch")]
        if missing:
            raise InternalError(
                f"syncopate.ops: the fused {self.kernel_name} expects parameters the op does not bind: {missing}"
            )
        if self.use_tma and self.device.type == "cuda":
            _gemm_module().ensure_descriptor_allocator()

    def _b_arg(self, b: torch.Tensor) -> torch.Tensor:
        # The TMA kernel reads an nk B as the [N, K] tensor it is a view of.
        return b.t() if (self.use_tma and self.b_is_nk) else b

    def warm_up(self, a, b, c, signals_like: torch.Tensor, *operands) -> None:
        """Compiles and loads the kernel with the specialisations real calls use, on scratch
        signals and a scratch epoch word holding 0 (every wait holds at once; notifies land in
        the scratch). operands: the kernel's pointer arguments after c, if any
        (StagedReduceGemm: p, out)."""
        kwargs = dict(
            self.kwargs,
            sy_signals=torch.zeros_like(signals_like),
            sy_epoch=epoch_word(0, self.device),
            sy_error=new_error_record(self.device),
        )
        self.kernel[self.grid](a, self._b_arg(b), c, *operands, *self.scalars, **kwargs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        check_error(kwargs["sy_error"], self.tables, f"fused {self.kernel_name} (warm-up)")

    def launch(self, a, b, c, signals: torch.Tensor, epoch: torch.Tensor, *operands) -> None:
        """Enqueues the fused GEMM on the current stream (no synchronisation). epoch: the int32[1]
        epoch word the call advanced (PlanWorkspace.epoch_word); the kernel reads it."""
        kwargs = self.kwargs
        kwargs["sy_signals"] = signals
        kwargs["sy_epoch"] = epoch
        self.kernel[self.grid](a, self._b_arg(b), c, *operands, *self.scalars, **kwargs)

    def copy_flag_to_host(self) -> None:
        """Enqueues the copy of the record's flag to pinned host memory on the current stream
        (a graph captures it with the call)."""
        if self.flag_on_host is not None:
            self.flag_on_host.enqueue_copy(self.error.data_ptr(), torch.cuda.current_stream(self.device).cuda_stream)

    def timed_out(self) -> bool:
        """Whether a tile's wait timed out in a call whose flag copy has completed; no
        synchronization (a call still running is seen by a later look)."""
        if self.flag_on_host is None:
            return bool(self.error[0].item())
        return self.flag_on_host.value != 0

    def check(self) -> None:
        """After a synchronize: raises WaitTimeoutError if a tile's wait ran past its bound
        (the record keeps the first timeout since the last check; it is cleared here)."""
        try:
            check_error(self.error, self.tables, f"fused {self.kernel_name}")
        finally:
            self.error.zero_()
            if self.flag_on_host is not None:
                self.flag_on_host.clear()


class Fp8FusedGemm(FusedGemm):
    """FusedGemm of kernels/gemm_fp8.py's gemm_fp8_tma_kernel: e4m3 A and B, fp32 scales, bf16 C.

    a_pitch: A's row pitch in elements (k + 16 for AG+GEMM's gathered rows, which carry their
    scales; k for an A read in place). stride_sa: the element stride of A's scales (the packed
    rows' pitch / 4, or 1 for a per-row buffer); B's scales are always a per-column buffer
    (stride 1). Fixed here so that calls never compile another variant (ops/fp8.py).
    The launch takes (scale_a, scale_b) as its operands after c.
    """

    def __init__(
        self,
        *,
        plan,
        rank: int,
        m: int,
        n: int,
        k: int,
        b_layout: str,
        config,
        accesses,
        tile_order: str,
        device: torch.device,
        wait_bound_ns: int,
        producer: bool,
        num_programs: int,
        a_pitch: int,
        stride_sa: int,
    ):
        self.use_tma = True
        self.kernel_name = FP8_KERNEL
        self.kernel = transformed_kernel(FP8_KERNEL, FP8_MODULE)
        # Hopper's FP8 MMA reads B K-major: a B stored [K, N] is read through its kept K-major
        # copy (kernels/gemm_fp8.py, KMajorCopies), i.e. the kernel is bound for an [N, K] B.
        self.b_through_copy = b_layout == "kn"
        self._bind(
            plan=plan,
            rank=rank,
            m=m,
            n=n,
            b_layout="nk",
            config=config,
            accesses=accesses,
            tile_order=tile_order,
            device=device,
            wait_bound_ns=wait_bound_ns,
            num_programs=num_programs,
        )
        self.kwargs.update(
            B_IS_NK=self.b_is_nk,
            EPILOGUE_SPLIT=config.epilogue_split,
            WARP_SPECIALIZE=config.warp_specialize,
            FLATTEN=config.flatten,
            C_STORE_POINTERS=bool(producer),
        )
        b_pitch = k if self.b_is_nk else n
        self.scalars = (m, n, k, a_pitch, b_pitch, n, stride_sa, 1, self.num_programs)
        self.m, self.n, self.stride_sa = m, n, stride_sa
        self._finish_binding()

    def check_scales(self, scale_a: torch.Tensor, scale_b: torch.Tensor) -> None:
        """The kernel reads scale_a[row * stride_sa] for M rows and scale_b[col] for N columns:
        InternalError unless both tensors' storage holds that many (an out-of-bounds read would
        be an illegal address on the GPU, garbage under the interpreter)."""
        for name, t, count in (("scale_a", scale_a, (self.m - 1) * self.stride_sa + 1), ("scale_b", scale_b, self.n)):
            available = t.untyped_storage().nbytes() // 4 - t.storage_offset()
            if t.dtype != torch.float32 or available < count:
                raise InternalError(
                    f"syncopate.ops: the FP8 kernel would read {count} float32 of {name}, whose "
                    f"storage holds {available} ({t.dtype})"
                )

    def warm_up(self, a, b, c, signals_like: torch.Tensor, *operands) -> None:
        self.check_scales(*operands)
        super().warm_up(a, b, c, signals_like, *operands)

    def _b_arg(self, b: torch.Tensor) -> torch.Tensor:
        if self.b_through_copy:
            from syncopate.kernels.gemm_fp8 import k_major_copies

            return k_major_copies.get(b)
        return super()._b_arg(b)


def _host_flag():
    """The runtime's HostFlag: pinned host memory the call's stream copies the flag into (a
    torch copy into pinned memory is not reliably capturable in a CUDA graph)."""
    from syncopate.runtime import require_runtime

    return require_runtime().HostFlag()


def persistent_programs(device: torch.device, backend: str, producer: bool = False) -> int:
    """The persistent grid: SMs less those the backend's communication (and, for a producer
    GEMM, the destination's add kernels) needs."""
    return max(1, num_sms(device) - reserved_sms(backend, producer))
