"""The local Triton GEMM (kernels/gemm.py) launched at a target residency (blocks per SM).

    g = ShapedGemm(device, residency=1, sm_carveout=16)
    g(a, b, out)            # out = a @ b; at most 1 block per SM, on 16 SMs fewer than the GPU has
    g.shapings              # what each compiled kernel was padded with, and the driver's answer

The persistent kernel runs `residency` programs per usable SM (all SMs minus sm_carveout), each
given the extra dynamic shared memory that caps residency there (syncopate._runtime's
shape_for_residency on the kernel's real registers, threads and shared memory, then checked
with cuOccupancyMaxActiveBlocksPerMultiprocessor: a mismatch is a DeviceError, never a silent
unshaped launch). residency=None launches the kernel as kernels.gemm would, on the usable SMs.
Split-K is not used (one kernel per GEMM piece keeps stream order simple).
"""

from __future__ import annotations

import importlib
from typing import Optional

import torch
import triton

from syncopate.errors import DeviceError, UserError
from syncopate.kernels.configs import GemmConfig
from syncopate.runtime import resolve_device
from syncopate.kernel_level.shaped_launch import compiled_for, launch_compiled, padded_kernel

# The module, not the function `gemm` that syncopate.kernels re-exports under the same name.
gemm_module = importlib.import_module("syncopate.kernels.gemm")


class ShapedGemm:
    """C = A @ B with the persistent Triton GEMM at `residency` blocks per SM."""

    def __init__(
        self,
        device: torch.device,
        residency: Optional[int] = None,
        sm_carveout: Optional[int] = None,
        config: Optional[GemmConfig] = None,
    ):
        self.device = resolve_device(device)
        if residency is not None and int(residency) < 1:
            raise UserError(f"residency: expected None or >= 1 block per SM, got {residency}")
        self.residency = None if residency is None else int(residency)
        self.num_sms = gemm_module.device_limits(self.device)[0] if self.device.type == "cuda" else 4
        carve = int(sm_carveout or 0)
        if not 0 <= carve < self.num_sms:
            raise UserError(f"sm_carveout: expected 0 <= SMs kept free < {self.num_sms} (the GPU's SMs), got {carve}")
        self.usable_sms = self.num_sms - carve
        self.config = config
        self.shapings: dict[str, dict] = {}
        self._padded: dict[int, tuple] = {}  # id(compiled) -> (compiled, padded copy)

    def _shape(self, compiled):
        """The padded copy of `compiled` for self.residency (made once per compiled kernel)."""
        hit = self._padded.get(id(compiled))
        if hit is not None and hit[0] is compiled:
            return hit[1]
        from syncopate.runtime import require_runtime

        rt = require_runtime()
        compiled._init_handles()
        limits = rt.device_sm_limits(self.device.index)
        threads = int(compiled.packed_metadata[0]) * int(limits.warp_size)  # blockDim = 32 * num_warps
        own = rt.function_resources(int(compiled.function))
        kernel = rt.KernelResources(
            threads, own.registers_per_thread, own.static_smem_bytes, int(compiled.metadata.shared)
        )
        shaping = rt.shape_for_residency(kernel, limits, self.residency)
        if not shaping.ok:
            raise UserError(
                f"residency {self.residency} for {compiled.name} ({threads} threads, "
                f"{own.registers_per_thread} registers, {compiled.metadata.shared} B shared): "
                f"{shaping.reason}"
            )
        padded = padded_kernel(compiled, shaping.extra_dynamic_smem, limits.smem_per_block_optin)
        padded._init_handles()
        measured = rt.occupancy_blocks(int(padded.function), threads, int(padded.metadata.shared))
        natural = rt.occupancy_blocks(int(compiled.function), threads, int(compiled.metadata.shared))
        if measured != self.residency:
            raise DeviceError(
                f"residency {self.residency} for {compiled.name}: the driver fits {measured} blocks per "
                f"SM with {padded.metadata.shared} B of shared memory (the model said "
                f"{shaping.blocks}; unpadded the driver says {natural})"
            )
        self.shapings[f"{compiled.name}/{compiled.hash[:8]}"] = {
            "threads": threads,
            "registers": own.registers_per_thread,
            "shared": int(compiled.metadata.shared),
            "extra_shared": int(shaping.extra_dynamic_smem),
            "natural_model": int(shaping.natural_blocks),
            "natural_driver": natural,
            "residency_driver": measured,
        }
        self._padded[id(compiled)] = (compiled, padded)
        return padded

    def natural_residency(self, a: torch.Tensor, b: torch.Tensor) -> int:
        """Blocks per SM the unpadded kernel for this shape reaches (the driver's answer)."""
        from syncopate.runtime import require_runtime

        fn, grid, args, kwargs = self._launch_args(
            a, b, torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
        )
        compiled, _ = compiled_for(fn, grid, *args, **kwargs)
        compiled._init_handles()
        rt = require_runtime()
        threads = int(compiled.packed_metadata[0]) * int(rt.device_sm_limits(self.device.index).warp_size)
        return rt.occupancy_blocks(int(compiled.function), threads, int(compiled.metadata.shared))

    def _launch_args(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
        gemm_module.check_operands(a, b)
        m, k = a.shape
        n = b.shape[1]
        cfg = self.config or gemm_module.select_config(m, n, k, a.device, a.dtype, allow_split_k=False)
        tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
        grid = (max(1, min(self.usable_sms * (self.residency or 1), tiles)),)
        a_view = a if a.stride(1) == 1 else a.contiguous()
        b_is_nk = b.stride(1) != 1 and b.stride(0) == 1
        b_view = b.t() if b_is_nk else (b if b.stride(1) == 1 else b.contiguous())
        if all(gemm_module.tma_compatible(t) for t in (a_view, b_view, out)):
            if a.is_cuda:
                gemm_module.ensure_descriptor_allocator()
            return (
                gemm_module.gemm_tma_kernel,
                grid,
                (a_view, b_view, out, m, n, k, a_view.stride(0), b_view.stride(0), out.stride(0), grid[0]),
                dict(
                    B_IS_NK=b_is_nk,
                    BLOCK_M=cfg.block_m,
                    BLOCK_N=cfg.block_n,
                    BLOCK_K=cfg.block_k,
                    GROUP_M=cfg.group_m,
                    EPILOGUE_SPLIT=cfg.epilogue_split,
                    WARP_SPECIALIZE=cfg.warp_specialize,
                    FLATTEN=cfg.flatten,
                    C_STORE_POINTERS=False,
                    num_stages=cfg.num_stages,
                    num_warps=cfg.num_warps,
                ),
            )
        return (
            gemm_module.gemm_pointer_kernel,
            grid,
            (
                a,
                b,
                out,
                m,
                n,
                k,
                a.stride(0),
                a.stride(1),
                b.stride(0),
                b.stride(1),
                out.stride(0),
                out.stride(1),
                grid[0],
            ),
            dict(
                BLOCK_M=cfg.block_m,
                BLOCK_N=cfg.block_n,
                BLOCK_K=cfg.block_k,
                GROUP_M=cfg.group_m,
                num_stages=cfg.num_stages,
                num_warps=cfg.num_warps,
            ),
        )

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        m, n = a.shape[0], b.shape[1]
        if out.shape != (m, n) or out.dtype != a.dtype:
            raise UserError(f"ShapedGemm: out must be {m}x{n} {a.dtype}, got {tuple(out.shape)} {out.dtype}")
        if m == 0 or n == 0:
            return out
        if a.shape[1] == 0:
            return out.zero_()
        fn, grid, args, kwargs = self._launch_args(a, b, out)
        if self.residency is None:
            fn[grid](*args, **kwargs)
            return out
        if not a.is_cuda:
            raise UserError(
                f"ShapedGemm: residency={self.residency} needs CUDA tensors (the interpreter has no "
                f"SMs to shape), got {a.device}"
            )
        compiled, bound = compiled_for(fn, grid, *args, **kwargs)
        launch_compiled(self._shape(compiled), grid, bound)
        return out
