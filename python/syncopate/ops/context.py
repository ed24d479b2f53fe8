"""The shared base of the op contexts (AgGemm, GemmRs, GemmAr): the checked options, the GEMM
configuration, the simulator's choice, the call through CUDA graphs and the wait check; and the
dtypes the ops accept. The collective-specific parts (buffers, enqueue) live in ag_gemm.py and
gemm_rs.py."""

from __future__ import annotations

import weakref
from typing import NamedTuple, Optional, Tuple

import torch

from syncopate.errors import ShapeError, UserError, WaitTimeoutError
from syncopate.ops.call_graphs import CallGraphs, FusedCall, capturing
from syncopate.ops.choice import choose
from syncopate.ops.fp8 import check_fp8_context, is_fp8, output_dtype
from syncopate.ops.common import (
    BACKENDS,
    barrier,
    check_aligned,
    check_b_layout,
    check_dims,
    check_options,
    group_rank_world,
    ranks_sharing_a_device,
)
from syncopate.ops.topology import check_single_node, group_nodes
from syncopate.runtime import DEFAULT_WAIT_BOUND_NS, plan_dtype, resolve_device

# The operand dtypes of the fused ops (their output has the operands' dtype), as the torch custom
# ops and syncopate.nn take them.
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
# The contexts also take FP8 operands, whose calls pass scales and return bf16 (ops/fp8.py); the
# custom ops have no scale arguments yet, so they refuse FP8.
CONTEXT_DTYPES = SUPPORTED_DTYPES + (torch.float8_e4m3fn,)


class _FastPath(NamedTuple):
    """What OpContext._fast_call compares a repeated call's operands with, and what it replays
    through (OpContext._fast_path)."""

    dtype: torch.dtype
    out_dtype: torch.dtype
    device: torch.device
    device_index: int  # what Tensor.get_device() returns for an operand on `device`
    a_shape: torch.Size
    b_shape: torch.Size
    out_shape: torch.Size
    b_nk_stride: Optional[Tuple[int, int]]  # B's strides for an "nk" B; None: "kn", a contiguous B
    monitor: object  # the runtime's WaitMonitor
    flag: object  # the kernel's HostFlag (None without a fused kernel)
    graphs: CallGraphs
    # Per operand (a, b, out): (weak reference, version counter) of the tensor object whose
    # metadata was last compared and passed, or None (OpContext._fast_call).
    seen: list


class OpContext:
    """What AgGemm, GemmRs and GemmAr share: the checked options, the GEMM configuration and
    the simulator's choice. Subclasses set `collective` and build their buffers in _build."""

    collective = "all-gather"
    # Whether the plan's tensor holds the GEMM's operand (AG+GEMM: A) or its result (GEMM+RS/AR:
    # C); it decides the bytes a chunk moves (FP8 operands, bf16 results).
    plan_holds_operand = True

    def __init__(
        self,
        group,
        *,
        m: int,
        k: int,
        n: int,
        dtype: torch.dtype,
        device: Optional[torch.device] = None,
        backend: str = "auto",
        algorithm: str = "auto",
        split: Optional[int] = None,
        tile_order: str = "auto",
        mode: str = "auto",
        b_layout: str = "kn",
        wait_bound_ns: int = DEFAULT_WAIT_BOUND_NS,
        drop_chunk: int = -1,
        graph: bool = True,
        plan=None,
        nodes=None,
    ):
        who = type(self).__name__
        # Every argument is checked before any GPU work.
        check_dims(who, m=m, k=k, n=n)
        check_options(
            who, backend=backend, algorithm=algorithm, split=split, tile_order=tile_order, mode=mode, b_layout=b_layout
        )
        if dtype not in CONTEXT_DTYPES:
            raise UserError(f"{who}: dtype {dtype} is not supported; use one of {CONTEXT_DTYPES}")
        group, rank, world = group_rank_world(group)
        # nodes=: the group's topology (ops/topology.py: keyword, SYNCOPATE_NODES, torchrun's
        # LOCAL_WORLD_SIZE); a group spanning nodes is refused by name for now.
        self.nodes = group_nodes(group, nodes=nodes)
        check_single_node(who, self.nodes)
        if m % world != 0:
            raise ShapeError(f"{who}: m={m} rows cannot be split into {world} equal shards (one per rank)")
        from syncopate.kernels.gemm import select_config
        from syncopate.ops.fused_gemm import device_capability, fused_config

        self.device = resolve_device(device)
        self.m, self.k, self.n, self.dtype, self.rank, self.world = m, k, n, dtype, rank, world
        self.fp8 = is_fp8(dtype)
        self.out_dtype = output_dtype(dtype)
        # The torch dtype of the plan's tensor (its chunks' bytes), and the plan's spelling.
        self.plan_torch_dtype = dtype if self.plan_holds_operand else self.out_dtype
        if self.fp8:
            check_fp8_context(who, self.device, k, n)
        self.group = group
        self.shard_rows = m // world
        self.b_layout = b_layout
        self.wait_bound_ns = int(wait_bound_ns)
        # The GEMM's own per-shape configuration (no split-K: every tile is final when stored);
        # the simulator and the lowering use its real block shape.
        if self.fp8:
            from syncopate.kernels.gemm_fp8 import select_fp8_config

            local_config = select_fp8_config(m, n, k, self.device)
        else:
            local_config = select_config(m, n, k, self.device, dtype, allow_split_k=False)
        self.config = fused_config(local_config, device_capability(self.device))
        # plan=: a plan the user brought (ops/user_plan.py) runs instead of a template.
        self._user_plan = None
        if plan is not None and self.fp8:
            raise UserError(
                f"{who}: plan= with FP8 operands is not supported yet (the FP8 ops gather A's rows "
                "with their scales in a plan tensor of their own layout); leave plan unset"
            )
        if plan is not None:
            from syncopate.ops.user_plan import check_user_plan, choice_for_plan

            self._user_plan, backend = check_user_plan(
                who,
                plan,
                collective=self.collective,
                m=m,
                k=k,
                n=n,
                world=world,
                dtype=plan_dtype(self.plan_torch_dtype),
                backend=backend,
                reduce=getattr(self, "_reduce_request", None),
            )
            if backend == "nccl":
                self._usable_backends(backend)  # refused by name where ranks share a GPU
            choice = choice_for_plan(
                who,
                self._user_plan,
                collective=self.collective,
                m=m,
                n=n,
                k=k,
                world=world,
                dtype=plan_dtype(self.plan_torch_dtype),
                block_m=self.config.block_m,
                block_n=self.config.block_n,
                backend=backend,
                tile_order=tile_order,
                mode=mode,
            )
        else:
            backend = self._usable_backends(backend)
            choice = choose(
                self.collective,
                m=m,
                n=n,
                k=k,
                world=world,
                dtype=plan_dtype(self.plan_torch_dtype),
                gemm_dtype=plan_dtype(dtype),
                block_m=self.config.block_m,
                block_n=self.config.block_n,
                backend=backend,
                algorithm=algorithm,
                split=split,
                tile_order=tile_order,
                mode=mode,
                **self._choice_options(mode=mode, algorithm=algorithm),
            )
        self.choice = choice
        self.gemm = None
        # Where "auto" decided that overlap does not pay, the call is exactly what the user would
        # run without Syncopate (NCCL collective + torch.matmul): no heap, no executor. An
        # explicit mode="sequential" keeps the executor's sequential path (every backend, bounded
        # waits), which the GPU tests exercise.
        self.torch_fallback = mode == "auto" and choice.decision == "sequential" and (group is not None or world == 1)
        self.ws = None
        if self.torch_fallback:
            self._build_fallback()
        else:
            self._build(drop_chunk)
        self.graphs = CallGraphs(
            who,
            enabled=graph and not self.torch_fallback and self.device.type == "cuda",
            refusal=self._capture_refusal(),
        )
        # No rank may start a call (and spin) before every rank has loaded its kernels.
        barrier(group, self.device)

    def _choice_options(self, *, mode: str, algorithm: str) -> dict:
        """More keywords of ops.choice.choose for this op (GemmRs: which reductions to compare)."""
        return {}

    def _usable_backends(self, backend: str):
        """`backend`, or for "auto" the backends that can run on this group: where two ranks share
        a GPU (a test mode, or more ranks than GPUs) NCCL cannot, so "auto" leaves it out and
        backend="nccl" is refused by name."""
        shared = ranks_sharing_a_device(self.group, self.device)
        if shared is None:
            return backend
        r, s, gpu = shared
        if backend == "nccl":
            raise UserError(
                f"{type(self).__name__}: backend='nccl' cannot run here: ranks {r} and {s} share "
                f"GPU {gpu} and NCCL refuses two ranks on one device; use 'copy-engine' or 'sm-copy'"
            )
        return tuple(b for b in BACKENDS if b != "nccl") if backend == "auto" else backend

    def _capture_refusal(self) -> Optional[str]:
        """Why this context's calls cannot be captured in a CUDA graph, or None."""
        if self.ws is not None and self.ws.nccl is not None:
            return (
                "its plan moves chunks with NCCL, whose calls are bounded by a host watchdog that "
                "polls events of each call, which a replayed graph does not give (a lost peer would "
                "hang the replay); use backend='copy-engine' or 'sm-copy' to capture"
            )
        return None

    def _run_call(self, key, enqueue, check: bool) -> None:
        """One call's device work through the context's graphs (see CallGraphs.run); enqueue: a
        callable, or a FusedCall (the fused kernel's calls: its graph is captured as a head and
        a tail, call_graphs.py "Split graphs"). Before it,
        without synchronizing, raises a wait that timed out in an earlier call (report_timeouts);
        after it, if `check` and nothing is being captured, synchronizes and raises one of this
        call. Once a graph exists, later calls may take the fast path (_fast_call)."""
        under_capture = capturing()  # asked once per call (each query costs host time)
        if not under_capture:
            self.report_timeouts()
        if isinstance(enqueue, FusedCall):  # its steps, so that a graph can be cut between them
            enqueue.after = self.gemm.copy_flag_to_host
            work = enqueue
        else:

            def work() -> None:
                enqueue()
                if self.gemm is not None:
                    self.gemm.copy_flag_to_host()

        self.graphs.run(key, work, under_capture)
        if self._fast is None and self.graphs.captures:
            self._fast = self._fast_path()
        if check and not under_capture:
            self.check()

    # -- the fast path of a call that repeats an earlier one --------------------------------------
    _fast = None  # what _fast_call compares, once the context has a graph (_fast_path)

    def _operand_shapes(self):
        """(a's shape, out's shape) a call takes (the shapes _check_operands and check_out want)."""
        raise NotImplementedError

    def _fast_path(self):
        """What a call's operands must be for _fast_call to replay a graph without the full
        checks, or None where this context has no fast path: FP8 (the scales are copied per
        call), the torch fallback, or a timeout record the guarded replay could not watch (the
        runtime's WaitMonitor and the kernel's HostFlag are what report_timeouts reads)."""
        if self.fp8 or self.ws is None or not self.graphs.enabled:
            return None
        monitor = getattr(self.ws, "monitor", None)
        flag = None if self.gemm is None else getattr(self.gemm, "flag_on_host", None)
        if monitor is None or (self.gemm is not None and flag is None):
            return None
        a_shape, out_shape = (torch.Size(s) for s in self._operand_shapes())
        # B's layout as the checks read it: "kn" is a contiguous [K, N]; "nk" the transpose of a
        # contiguous [N, K], compared here by its strides (stricter than the check's
        # b.t().is_contiguous() only where a dimension is 1; such a call declines to the full path).
        b_nk_stride = (1, self.k) if self.b_layout == "nk" else None
        return _FastPath(
            dtype=self.dtype,
            out_dtype=self.out_dtype,
            device=self.device,
            # get_device() of a CPU tensor is -1; a CUDA context's device always has its index.
            device_index=-1 if self.device.type != "cuda" else self.device.index,
            a_shape=a_shape,
            b_shape=torch.Size((self.k, self.n)),
            out_shape=out_shape,
            b_nk_stride=b_nk_stride,
            monitor=monitor,
            flag=flag,
            graphs=self.graphs,
            seen=[None, None, None],
        )

    def _fast_call(self, a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """The host path of a call that repeats an earlier one (docs/RUNTIME.md, "The host's
        share of a call"): `out` (a new tensor if None) once the graph captured for these
        operands' addresses has been replayed, or None, having launched nothing, when the call
        must take the full path: no graph yet or for these addresses, an operand whose dtype,
        shape, contiguity or device is not what the checks accept (the full path then raises
        the error), the stream being captured by the caller, or an earlier timeout to report.

        Each operand's metadata is compared (_fast_compare) unless it is the very tensor object
        that passed last time with its version counter unchanged: every in-place operation on a
        tensor or a view of it bumps that counter, the metadata ones included (t_, resize_,
        as_strided_, set_, squeeze_...), so an unchanged counter on the same object means
        unchanged metadata. Not seen: `t.data = other` (it swaps the metadata without a bump),
        where `other` starts at the same address (another address misses the graph lookup).
        Tensors made under torch.inference_mode() have no counter and are compared every call.
        A training or serving loop that reuses its buffers thus pays an identity test and a
        counter read per operand (the comparison read a dozen attributes, each building a
        Python object: more host time than the launch itself on the slower hosts). The address
        key is read every call; the alignment depends on it alone and was checked when the
        graph for these addresses was made. The capture query, both timeout looks and the
        launch are one runtime call (CallGraphs.replay_cached)."""
        fast = self._fast
        if fast is None:
            return None
        seen = fast.seen
        if out is None:
            out = torch.empty(fast.out_shape, dtype=fast.out_dtype, device=fast.device)
            out_ok = True  # made right here; not remembered (a new object each call)
        else:
            s = seen[2]
            out_ok = s is not None and s[0]() is out and out._version == s[1]
        s = seen[0]
        a_ok = s is not None and s[0]() is a and a._version == s[1]
        s = seen[1]
        b_ok = s is not None and s[0]() is b and b._version == s[1]
        if not (a_ok and b_ok and out_ok) and not self._fast_compare(fast, a, b, out, a_ok, b_ok, out_ok):
            return None
        if not fast.graphs.replay_cached((a.data_ptr(), b.data_ptr(), out.data_ptr()), fast.monitor, fast.flag):
            return None
        return out

    @staticmethod
    def _fast_compare(fast: "_FastPath", a, b, out, a_ok: bool, b_ok: bool, out_ok: bool) -> bool:
        """Whether the operands not yet known good (a_ok, b_ok, out_ok False) are what the full
        checks accept, read with the same meaning: is_contiguous for a, out and a "kn" B (the
        strides for an "nk" B: stricter only where a dimension is 1, and such a call declines
        to the full path), get_device for the device (for a CUDA context's index it holds only
        for a tensor on that GPU). Those that pass are remembered in fast.seen."""
        dtype, index = fast.dtype, fast.device_index
        if not a_ok and (
            a.dtype is not dtype or a.shape != fast.a_shape or not a.is_contiguous() or a.get_device() != index
        ):
            return False
        if not b_ok and (
            b.dtype is not dtype
            or b.shape != fast.b_shape
            or (not b.is_contiguous() if fast.b_nk_stride is None else b.stride() != fast.b_nk_stride)
            or b.get_device() != index
        ):
            return False
        if not out_ok and (
            out.dtype is not fast.out_dtype
            or out.shape != fast.out_shape
            or not out.is_contiguous()
            or out.get_device() != index
        ):
            return False
        seen = fast.seen
        for i, (t, ok) in enumerate(((a, a_ok), (b, b_ok), (out, out_ok))):
            if not ok:
                seen[i] = None if t.is_inference() else (weakref.ref(t), t._version)
        return True

    def report_timeouts(self) -> None:
        """Raises WaitTimeoutError (through check(), which names the chunk) if a wait of an
        earlier call has timed out as far as the host can see without synchronizing: the
        runtime's record is mapped host memory, and each call ends by copying the kernel's flag
        to pinned host memory. So a call with check=False stays asynchronous and a lost chunk
        still surfaces, one or two calls later at most, or at the next check()."""
        if self.ws is None:
            return
        if self.ws.timed_out() or (self.gemm is not None and self.gemm.timed_out()):
            self.check()

    # -- what the benchmark and the tests read ----------------------------------------------------
    @property
    def decision(self) -> str:
        return self.choice.decision

    @property
    def backend(self) -> str:
        return self.choice.backend

    @property
    def algorithm(self) -> str:
        return self.choice.algorithm

    @property
    def split(self) -> int:
        return self.choice.split

    @property
    def tile_order(self) -> str:
        return self.choice.tile_order

    @property
    def predicted_us(self) -> dict:
        return dict(self.choice.predicted_us)

    @property
    def reason(self) -> str:
        return self.choice.reason

    @property
    def gemm_config(self) -> str:
        return self.config.name

    @property
    def sequential(self) -> bool:
        return self.choice.decision == "sequential"

    @property
    def call_mode(self) -> str:
        """How a call runs: "graph" (one replay of this context's CUDA graph), "eager" (enqueued
        op by op: graph=False, or a configuration that cannot be captured, see capture_refusal)
        or "torch" (the sequential fallback: NCCL collective + torch.matmul)."""
        return "torch" if self.torch_fallback else self.graphs.mode

    @property
    def capture_refusal(self) -> Optional[str]:
        return self.graphs.refusal

    @property
    def sequential_path(self) -> Optional[str]:
        """How a sequential context runs: "torch" (NCCL collective + torch.matmul, the auto
        fallback) or "executor" (the plan's chunks with the chosen backend, then the GEMM)."""
        if self.decision != "sequential":
            return None
        return "torch" if self.torch_fallback else "executor"

    @property
    def kernel_origin(self) -> str:
        """ "transformer" (the fused GEMM is the transformer's output) or "sequential"."""
        return "sequential" if self.gemm is None else "transformer"

    @property
    def kernel_name(self) -> Optional[str]:
        """The local kernel the fused GEMM was made from (gemm_tma_kernel or gemm_pointer_kernel)."""
        return None if self.gemm is None else self.gemm.kernel_name

    def _make_plan(self, shape, tensor, input: str = ""):
        import syncopate as sy

        if self._user_plan is not None:
            return self._user_plan
        return sy.make_plan(
            self.collective,
            world_size=self.world,
            shape=shape,
            algorithm=self.algorithm,
            split=self.split,
            dtype=plan_dtype(self.plan_torch_dtype),
            dim=0,
            backend=self.backend,
            tensor=tensor,
            input=input,
        )

    def _make_gemm(self, accesses, producer: bool, a_pitch: Optional[int] = None, stride_sa: int = 1):
        from syncopate.ops.fused_gemm import Fp8FusedGemm, FusedGemm, persistent_programs

        if self.fp8:
            return Fp8FusedGemm(
                plan=self.plan,
                rank=self.rank,
                m=self.m,
                n=self.n,
                k=self.k,
                b_layout=self.b_layout,
                config=self.config,
                accesses=accesses,
                tile_order=self.tile_order,
                device=self.device,
                wait_bound_ns=self.wait_bound_ns,
                producer=producer,
                num_programs=persistent_programs(self.device, self.backend, producer),
                a_pitch=self.k if a_pitch is None else a_pitch,
                stride_sa=stride_sa,
            )

        return FusedGemm(
            plan=self.plan,
            rank=self.rank,
            m=self.m,
            n=self.n,
            k=self.k,
            dtype=self.dtype,
            b_layout=self.b_layout,
            config=self.config,
            accesses=accesses,
            tile_order=self.tile_order,
            device=self.device,
            backend=self.backend,
            wait_bound_ns=self.wait_bound_ns,
            producer=producer,
            num_programs=persistent_programs(self.device, self.backend, producer),
        )

    def _scratch_b(self) -> torch.Tensor:
        if self.b_layout == "nk":
            return torch.zeros((self.n, self.k), dtype=self.dtype, device=self.device).t()
        return torch.zeros((self.k, self.n), dtype=self.dtype, device=self.device)

    def _check_operands(
        self, a: torch.Tensor, a_name: str, a_shape, b: torch.Tensor, b_name: str, a_to_kernel: bool
    ) -> None:
        """The per-call checks (attribute reads only). a_to_kernel: the fused GEMM reads `a`
        itself (GEMM+RS/AR), not a copy in the heap (AG+GEMM)."""
        who = type(self).__name__
        if tuple(a.shape) != tuple(a_shape) or tuple(b.shape) != (self.k, self.n):
            raise ShapeError(
                f"{who}: expected {a_name} {list(a_shape)} and {b_name} [{self.k}, {self.n}], "
                f"got {list(a.shape)} and {list(b.shape)}"
            )
        if a.dtype != self.dtype or b.dtype != self.dtype:
            raise UserError(f"{who}: operands must be {self.dtype}, got {a.dtype} and {b.dtype}")
        if a.device != self.device or b.device != self.device:
            raise UserError(f"{who}: operands must be on {self.device}, got {a.device} and {b.device}")
        if not a.is_contiguous():
            raise UserError(f"{who}: {a_name} must be contiguous; pass {a_name}.contiguous()")
        check_b_layout(who, b, self.b_layout)
        if self.gemm is not None:
            if a_to_kernel:
                check_aligned(who, a_name, a)
            check_aligned(who, b_name, b)

    def check(self) -> None:
        """Synchronizes, then raises WaitTimeoutError naming rank, slot, expected, seen, chunk.

        Both records are read (and cleared): the fused kernel's (a tile that waited for a chunk)
        and the runtime's (a chunk step or the stream that waited for a slot). One missing chunk
        often times out in both, the second as a consequence (a GEMM+AR gather chunk waits for
        own tiles that wait for the missing staged partial), so the message gives the kernel's
        first: it names the chunk the tiles read, which is where the cause is."""
        if self.ws is None:  # the torch fallback: NCCL reports its own errors
            torch.cuda.synchronize(self.device)
            return
        errors = []
        for check in (lambda: self.ws.check(synchronize=True), self.gemm.check if self.gemm is not None else None):
            if check is None:
                continue
            try:
                check()
            except WaitTimeoutError as exc:
                errors.append(str(exc))
        if errors:
            raise WaitTimeoutError("; also timed out: ".join(reversed(errors)))
