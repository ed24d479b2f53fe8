"""Launching a compiled Triton kernel with more dynamic shared memory than it needs.

Occupancy shaping (docs/KERNEL_LEVEL.md) caps how many blocks of a compute kernel fit on one SM
by giving each block extra, unused shared memory, so communication kernels find room beside it.
Triton 3.6 passes a kernel's shared memory at launch from its metadata:

- `CompiledKernel.metadata.shared` is the dynamic shared memory the kernel needs (Triton puts
  all of it in dynamic memory); `packed_metadata` = (num_warps, num_ctas, shared) is what the
  launcher (driver.active.launcher_cls) puts in the launch config's sharedMemBytes.
- `_init_handles` loads the module through `driver.active.utils.load_binary(name, cubin,
  shared, device)`, which, for shared > 48 KiB, sets the function's MAX_DYNAMIC_SHARED_SIZE_BYTES
  attribute to the opt-in maximum; it refuses (OutOfResources) a kernel whose shared exceeds it.

So `padded_kernel` returns a copy of the CompiledKernel whose metadata.shared is raised and whose
handles are not loaded yet: its first launch loads its own module with the larger size, and the
launcher then asks for the larger size on every launch. The original is left untouched (Triton's
cache keeps serving it). `launch_padded` launches such a copy with the arguments of an ordinary
`jit_fn[grid](*args, **kwargs)` call, binding them exactly as JITFunction.run does.

These are Triton internals (3.6); `check_triton_internals` raises a DeviceError naming what is
missing if another version lacks them.
"""

from __future__ import annotations

import copy
from typing import Any

from syncopate.errors import DeviceError, UserError


def check_triton_internals(compiled: Any) -> None:
    """Raises DeviceError unless `compiled` has the fields this module relies on."""
    missing = [
        name
        for name in ("metadata", "packed_metadata", "module", "function", "_run", "_init_handles")
        if not hasattr(compiled, name)
    ]
    if not missing and not hasattr(compiled.metadata, "_replace"):
        missing.append("metadata._replace (a namedtuple)")
    if not missing and not hasattr(compiled.metadata, "shared"):
        missing.append("metadata.shared")
    if missing:
        import triton

        raise DeviceError(
            f"shaped launch: this Triton ({triton.__version__}) CompiledKernel lacks {missing}; "
            "syncopate.kernel_level.shaped_launch is written against Triton 3.6"
        )


def padded_kernel(compiled: Any, extra_bytes: int, max_per_block: int | None = None) -> Any:
    """A copy of `compiled` launched with `extra_bytes` more dynamic shared memory.

    max_per_block: the device's per-block opt-in maximum (SmLimits.smem_per_block_optin); a
    total above it is a UserError naming both numbers (Triton would raise OutOfResources later).
    extra_bytes == 0 returns `compiled` itself.
    """
    check_triton_internals(compiled)
    extra = int(extra_bytes)
    if extra < 0:
        raise UserError(f"shaped launch: extra shared memory must be >= 0 bytes, got {extra}")
    if extra == 0:
        return compiled
    shared = int(compiled.metadata.shared) + extra
    if max_per_block is not None and shared > int(max_per_block):
        raise UserError(
            f"shaped launch: {compiled.metadata.shared} + {extra} = {shared} bytes of shared memory "
            f"per block exceeds the device's per-block maximum of {int(max_per_block)}"
        )
    twin = copy.copy(compiled)
    twin.metadata = compiled.metadata._replace(shared=shared)
    packed = tuple(compiled.packed_metadata)
    # The NVIDIA backend packs (num_warps, num_ctas, shared); refuse any other layout.
    if len(packed) != 3 or packed[2] != compiled.metadata.shared:
        raise DeviceError(
            f"shaped launch: packed metadata {packed} is not (num_warps, num_ctas, shared="
            f"{compiled.metadata.shared}); this Triton's launcher is not the one this module knows"
        )
    twin.packed_metadata = (packed[0], packed[1], shared)
    twin.module = None  # load a module of its own, with the larger size (see the module doc)
    twin.function = None
    twin._run = None
    return twin


def compiled_for(jit_fn: Any, grid: Any, *args: Any, **kwargs: Any) -> tuple[Any, list]:
    """(the CompiledKernel jit_fn[grid](*args, **kwargs) would launch, its bound arguments),
    compiling it (without launching) when it is not in Triton's cache yet."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import compute_cache_key

    kw = dict(kwargs)
    kw["debug"] = kw.get("debug", getattr(jit_fn, "debug", None)) or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    device = driver.active.get_current_device()
    kernel_cache, kernel_key_cache, _target, _backend, binder = jit_fn.device_caches[device]
    bound_args, specialization, options = binder(*args, **kw)
    key = compute_cache_key(kernel_key_cache, specialization, options)
    kernel = kernel_cache.get(key)
    if kernel is None:
        kernel = jit_fn.warmup(*args, grid=grid, **kwargs)
    if hasattr(kernel, "result"):  # an asynchronous compile
        kernel = kernel.result()
    return kernel, list(bound_args.values())


def launch_compiled(kernel: Any, grid: Any, bound_args: list) -> None:
    """Launches a CompiledKernel (e.g. a padded_kernel copy) on the current stream, as
    JITFunction.run launches what it finds in its cache."""
    from triton import knobs
    from triton.runtime.driver import driver

    kernel._init_handles()
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    g = tuple(grid) + (1, 1)
    launch_metadata = kernel.launch_metadata(grid, stream, *bound_args)  # None unless a hook is set
    kernel.run(
        g[0],
        g[1],
        g[2],
        stream,
        kernel.function,
        kernel.packed_metadata,
        launch_metadata,
        knobs.runtime.launch_enter_hook,
        knobs.runtime.launch_exit_hook,
        *bound_args,
    )
