"""Checking mode: runs a transformed kernel on small shapes with chunks that land late, and reports
every tile that read a chunk before waiting for it, or announced a chunk before storing it.

    import syncopate as sy
    report = sy.check_kernel("kernel.py", "matmul_kernel", make_problem, world=2)
    print(report)                 # "ok: ..." or one line per finding, naming the tile and the chunk
    report.raise_if_failed()      # UserError listing the findings

    python -m syncopate.check kernel.py --kernel matmul_kernel --problem problems.py:make_problem
    syncopate transform kernel.py --kernel matmul_kernel --check problems.py:make_problem

`make_problem(generator)` returns a CheckProblem: small tensors (a few tiles), the kernel's
arguments and grids, the tile grid, and which tensors the kernel writes. The communication is, by
default, a row split of each annotated tensor into `world` chunks (one signal slot each): a
consumer tile waits on the chunks its rows overlap, a producer tile notifies them. A problem may
give its own slot lists and chunk regions instead.

The runs, all under Triton's interpreter (TRITON_INTERPRET=1; programs run one after another):
1. the untransformed kernel: the reference result;
2. the transformed kernel in a shuffled tile order and in its reverse, every chunk in place:
   each tile's result must be the reference's, bit for bit;
3. for each consumed chunk and each of those orders: the chunk's rows hold NaN and its slot is
   low until the first tile waits on it, which lands it then (the latest a real peer could), so
   a tile that reads the chunk before its wait computes NaN: the report names the tile and the
   chunk (or says the tile read a chunk its wait list lacks);
4. in every run, when a tile notifies, its results must be stored (outputs start as +inf, meaning
   "not written") and a chunk whose count completes must be written whole; at the end each
   ready slot must have been raised exactly `writers` times.

The transformed kernel calls syncopate._check_sites (syncopate.language plus the hooks that land
chunks and check notifies), so checking never changes the kernel's code, only where its
primitives come from.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from syncopate.errors import UserError, WaitTimeoutError
from syncopate.settings import env

CHECK_LANGUAGE_MODULE = "syncopate._check_sites"
# How a transformed file imports its primitives (transform.hpp's default language module).
SITES_IMPORT = "import syncopate.language as syl  # [syncopate]"
# Waits never need to spin in a check (a late chunk lands when its first waiter arrives); the
# bound only keeps a wrong table from spinning long.
_WAIT_BOUND_NS = 2_000_000


@dataclass
class Chunk:
    """A region one slot's chunk carries: `tensor` (a key of CheckProblem.tensors)[index]."""

    tensor: str
    index: tuple


@dataclass
class CheckProblem:
    """One small instance of a kernel's work, for `check_kernel`.

    tensors: the kernel's tensors by name (CPU); args / meta: the positional arguments (the same
    tensor objects) and keyword arguments of a launch; grid_original: the untransformed kernel's
    grid; grid_transformed: the transformed one's (None: one program per tile; a persistent
    kernel's is its own). Tiles: tiles_m x tiles_n, numbered row-major, block_m rows and block_n
    columns each (block_n None: a tile spans every column).
    outputs: the tensors the kernel writes; each tile's part of them is compared with the
    untransformed kernel's. tile_regions(tile) -> [(tensor name, index)]: what a tile writes
    (default: its block of outputs[0]).
    Communication (all four, or none for a row split of each annotated tensor): tile_waits and
    tile_notifies (slot lists by tile id), slot_writers (notifies per call), chunks (by slot: the
    regions the chunk carries: a consumed chunk's are poisoned until it lands, a produced chunk's
    must be written when its count completes).
    """

    tensors: dict
    args: tuple
    meta: dict
    grid_original: tuple
    grid_transformed: Optional[tuple]
    tiles_m: int
    tiles_n: int
    block_m: int
    block_n: Optional[int] = None
    outputs: tuple = ("c",)
    tile_regions: Optional[Callable[[int], list]] = None
    tile_waits: Optional[list] = None
    tile_notifies: Optional[list] = None
    slot_writers: Optional[list] = None
    chunks: Optional[list] = None


@dataclass(frozen=True)
class Finding:
    """One thing the check saw go wrong. kind: read-before-wait, unlisted-read, wrong-result,
    unwritten, notify-before-store, chunk-incomplete, notify-count, never-waited, timeout."""

    kind: str
    tile: int
    chunk: int
    message: str


@dataclass
class CheckReport:
    kernel: str
    tiles: int
    chunks: int
    runs: int
    findings: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def __str__(self) -> str:
        head = (
            f"{self.kernel}: {self.runs} runs over {self.tiles} tiles and {self.chunks} chunks "
            "(late chunks, shuffled orders)"
        )
        if self.ok:
            return f"ok: {head}: every tile waited before reading and stored before notifying"
        lines = [f"FAILED: {head}: {len(self.findings)} finding(s)"]
        lines += [f"  {f.message}" for f in self.findings]
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise UserError(str(self))

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "tiles": self.tiles,
            "chunks": self.chunks,
            "runs": self.runs,
            "findings": [f.__dict__ for f in self.findings],
        }

    @classmethod
    def from_json(cls, data: dict) -> "CheckReport":
        return cls(
            data["kernel"], data["tiles"], data["chunks"], data["runs"], [Finding(**f) for f in data["findings"]]
        )


# --- loading kernels ---------------------------------------------------------------------------


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _module_name(stem: str, what: str) -> str:
    # Under the syncopate.kernels package, so that a kernel file's relative imports resolve.
    return f"syncopate.kernels._check_{what}_{stem}_{os.getpid()}_{random.randrange(1 << 30)}"


def load_transformed(source: str, kernel: str, filename: str = "transformed.py", directory=None):
    """The `kernel` of a transformed source, importing syncopate._check_sites as `syl` (what a
    check needs) instead of syncopate.language. Triton reads kernels through inspect, so
    the source is written to a file first."""
    if SITES_IMPORT in source:
        source = source.replace(SITES_IMPORT, f"import {CHECK_LANGUAGE_MODULE} as syl  # [syncopate]")
    elif f"import {CHECK_LANGUAGE_MODULE} as syl" not in source:
        raise UserError(f"{filename}: not a transformed kernel (no '{SITES_IMPORT}' line)")
    directory = Path(directory or tempfile.mkdtemp(prefix="syncopate-check-"))
    path = directory / f"{Path(filename).stem}_checked.py"
    path.write_text(source, encoding="utf-8")
    module = _load_module(path, _module_name(Path(filename).stem, "transformed"))
    return getattr(module, kernel)


def _transform_for_check(text: str, filename: str, kernel: str, plan=None):
    from syncopate import _core

    result = _core.transform(text, filename, kernel, plan=plan, language_module=CHECK_LANGUAGE_MODULE)
    directory = Path(tempfile.mkdtemp(prefix="syncopate-check-"))
    path = directory / f"{Path(filename).stem}_checked.py"
    path.write_text(result.source, encoding="utf-8")
    module = _load_module(path, _module_name(Path(filename).stem, "transformed"))
    return getattr(module, kernel)


# --- the interpreter ---------------------------------------------------------------------------


def interpreter_active() -> bool:
    return env.triton_interpret


def _require_interpreter() -> None:
    if not interpreter_active():
        raise UserError(
            "syncopate.check runs kernels with Triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is imported, or pass the problem as "
            "'file.py:function' so that check_kernel runs it in a subprocess"
        )
    from syncopate import language

    if not language.INTERPRET:
        raise UserError(
            "syncopate.language was imported before TRITON_INTERPRET=1 was set: the "
            "kernels would be compiled for a GPU; set it before importing syncopate"
        )


@contextlib.contextmanager
def _interpreter_index_fix():
    """Triton 3.6's interpreter turns a 1-element array into an int with int(array), which NumPy
    >= 2.4 refuses (every loop with a run-time bound fails): take the element explicitly, for the
    duration of a check only."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_lang_tensor
    try:
        yield
    finally:
        interpreter._patch_lang_tensor = original


# --- the communication of a problem --------------------------------------------------------------


def _even_split(size: int, parts: int, index: int) -> tuple[int, int]:
    base, rem = divmod(size, parts)
    begin = index * base + min(index, rem)
    return begin, base + (1 if index < rem else 0)


@dataclass
class _Comm:
    tile_waits: list
    tile_notifies: list
    slot_writers: list
    chunks: list  # by slot: [Chunk]
    consumed: list  # slots of consumed chunks
    produced: list  # slots of produced chunks


def _row_split(problem: CheckProblem, kernel_params: list, accesses: list, world: int) -> _Comm:
    num_tiles = problem.tiles_m * problem.tiles_n
    waits = [[] for _ in range(num_tiles)]
    notifies = [[] for _ in range(num_tiles)]
    writers, chunks, consumed, produced = [], [], [], []
    for access in accesses:
        param = access["param"]
        if param not in kernel_params or kernel_params.index(param) >= len(problem.args):
            raise UserError(
                f"check: '{param}' is not among the problem's positional arguments; give "
                "tile_waits, tile_notifies, slot_writers and chunks in the CheckProblem"
            )
        tensor = problem.args[kernel_params.index(param)]
        name = next((n for n, t in problem.tensors.items() if t is tensor), None)
        if name is None or access.get("m_dim", 0) != 0 or access.get("m_local_shard"):
            raise UserError(
                f"check: cannot split '{param}' by rows (m_dim={access.get('m_dim')}"
                f"{', m_local_shard' if access.get('m_local_shard') else ''}, or not in "
                "problem.tensors); give tile_waits, tile_notifies, slot_writers and chunks"
            )
        rows = tensor.shape[0]
        first_slot = len(writers)
        for s in range(world):
            begin, size = _even_split(rows, world, s)
            chunks.append([Chunk(name, (slice(begin, begin + size),))])
            writers.append(0)
        for tile in range(num_tiles):
            tm = tile // problem.tiles_n
            r0, r1 = tm * problem.block_m, min((tm + 1) * problem.block_m, rows)
            for s in range(world):
                begin, size = _even_split(rows, world, s)
                if size == 0 or not (begin < r1 and r0 < begin + size):
                    continue
                slot = first_slot + s
                if access["role"] == "consume":
                    waits[tile].append(slot)
                else:
                    notifies[tile].append(slot)
                    writers[slot] += 1
        for s in range(world):
            slot = first_slot + s
            if access["role"] == "consume":
                writers[slot] = 1
                consumed.append(slot)
            else:
                produced.append(slot)
    return _Comm(waits, notifies, writers, chunks, consumed, produced)


def _given_comm(problem: CheckProblem) -> _Comm:
    chunks = [list(c) for c in problem.chunks]
    produced = sorted({s for row in problem.tile_notifies for s in row})
    # A chunk nobody notifies lands from a peer: late in its runs even if no tile waits on it
    # (then a tile that reads it anyway shows), unless it is a region of an output.
    consumed = sorted(
        {s for row in problem.tile_waits for s in row}
        | {
            s
            for s in range(len(chunks))
            if s not in produced and all(c.tensor not in problem.outputs for c in chunks[s])
        }
    )
    return _Comm(
        [list(r) for r in problem.tile_waits],
        [list(r) for r in problem.tile_notifies],
        list(problem.slot_writers),
        chunks,
        consumed,
        produced,
    )


# --- one run -------------------------------------------------------------------------------------


def _default_regions(problem: CheckProblem, tile: int) -> list:
    tm, tn = divmod(tile, problem.tiles_n)
    out = problem.tensors[problem.outputs[0]]
    rows = slice(tm * problem.block_m, min((tm + 1) * problem.block_m, out.shape[0]))
    if problem.block_n is None:
        return [(problem.outputs[0], (rows,))]
    cols = slice(tn * problem.block_n, min((tn + 1) * problem.block_n, out.shape[1]))
    return [(problem.outputs[0], (rows, cols))]


def _describe_region(name: str, index: tuple) -> str:
    parts = []
    for s in index:
        if isinstance(s, slice):
            parts.append(":" if s.start is None and s.stop is None else f"{s.start or 0}:{s.stop}")
        else:
            parts.append(str(s))
    return f"{name}[{', '.join(parts)}]"


class _Run:
    """The state of one transformed launch, fed by the hooks of syncopate._check_sites."""

    def __init__(self, checker: "_Checker", problem: CheckProblem, signals, late: set, truth: dict):
        self.c = checker
        self.problem = problem
        self.signals = signals
        self.late = set(late)
        self.truth = truth  # late slot -> [(Chunk, true values)]
        self.landed_by: dict = {}  # slot -> tile whose wait landed it
        self.waited: set = set()
        self.notified: dict = {}  # tile -> count
        self.findings: list = []

    def on_wait(self, tile: int) -> None:
        self.waited.add(tile)
        for slot in self.c.comm.tile_waits[tile]:
            if slot in self.late and slot not in self.landed_by:
                for chunk, values in self.truth[slot]:
                    self.problem.tensors[chunk.tensor][chunk.index] = values
                self.signals[slot] = self.c.comm.slot_writers[slot]
                self.landed_by[slot] = tile

    def on_notify(self, tile: int) -> None:
        self.notified[tile] = self.notified.get(tile, 0) + 1
        slots = self.c.comm.tile_notifies[tile]
        if not slots:
            return
        unwritten = [(n, i) for n, i in self.c.regions(tile) if self.c.unwritten(self.problem, n, i)]
        for slot in slots:
            if unwritten:
                self.findings.append(
                    Finding(
                        "notify-before-store",
                        tile,
                        slot,
                        f"{self.c.tile_text(tile)} notified {self.c.chunk_text(slot)} before its store: "
                        f"{', '.join(_describe_region(n, i) for n, i in unwritten)} not written yet",
                    )
                )
            if int(self.signals[slot]) + 1 >= self.c.comm.slot_writers[slot]:
                missing = [
                    (ch.tensor, ch.index)
                    for ch in self.c.comm.chunks[slot]
                    if self.c.unwritten(self.problem, ch.tensor, ch.index)
                ]
                if missing:
                    self.findings.append(
                        Finding(
                            "chunk-incomplete",
                            tile,
                            slot,
                            f"{self.c.chunk_text(slot)} was announced complete by {self.c.tile_text(tile)} "
                            f"while {', '.join(_describe_region(n, i) for n, i in missing)} still had "
                            "unwritten elements",
                        )
                    )


class _Checker:
    def __init__(self, original, transformed, make: Callable, world: int, seeds: Sequence[int]):
        import torch

        from syncopate.launch import transformed_info

        self.torch = torch
        self.original = original
        self.transformed = transformed
        self.make = make
        self.seeds = list(seeds)
        self.info = transformed_info(transformed)
        fn = transformed
        while not hasattr(fn, "arg_names") and hasattr(fn, "fn"):
            fn = fn.fn
        self.kernel_params = [p for p in fn.arg_names if p not in self.info["params"]]
        glob = fn
        while not hasattr(glob, "__globals__") and hasattr(glob, "fn"):
            glob = glob.fn
        syl = getattr(glob, "__globals__", {}).get("syl")
        if getattr(syl, "__name__", None) != CHECK_LANGUAGE_MODULE:
            raise UserError(
                f"check: kernel {self.info['kernel']!r} does not call {CHECK_LANGUAGE_MODULE} "
                "(load it with syncopate.check.load_transformed or transform it with "
                f"language_module={CHECK_LANGUAGE_MODULE!r})"
            )
        probe = self._problem(self.seeds[0])
        self.problem0 = probe
        given = [probe.tile_waits, probe.tile_notifies, probe.slot_writers, probe.chunks]
        if all(g is not None for g in given):
            self.comm = _given_comm(probe)
        elif any(g is not None for g in given):
            raise UserError("check: give all of tile_waits, tile_notifies, slot_writers and chunks, or none")
        else:
            self.comm = _row_split(probe, self.kernel_params, self.info["accesses"], world)
        self.num_tiles = probe.tiles_m * probe.tiles_n
        for name, lists in (("tile_waits", self.comm.tile_waits), ("tile_notifies", self.comm.tile_notifies)):
            if len(lists) != self.num_tiles:
                raise UserError(f"check: {name} has {len(lists)} rows for {self.num_tiles} tiles")
        self.runs = 0
        self.findings: list = []
        self.reference: dict = {}
        self.order: list = []

    def _problem(self, seed: int) -> CheckProblem:
        gen = self.torch.Generator().manual_seed(seed)
        problem = self.make(gen)
        if not isinstance(problem, CheckProblem):
            raise UserError(f"check: the problem function returned {type(problem).__name__}, not a CheckProblem")
        for name in problem.outputs:
            if name not in problem.tensors:
                raise UserError(f"check: output {name!r} is not one of the problem's tensors")
            if not problem.tensors[name].is_floating_point():
                raise UserError(
                    f"check: output {name!r} must be a floating-point tensor (it starts as +inf, meaning 'not written')"
                )
            problem.tensors[name].fill_(float("inf"))
        return problem

    # descriptions
    def tile_text(self, tile: int) -> str:
        tm, tn = divmod(tile, self.problem0.tiles_n)
        where = f" (position {self.order.index(tile)} of the order)" if tile in self.order else ""
        return f"tile {tile} (row {tm}, column {tn}){where}"

    def chunk_text(self, slot: int) -> str:
        regions = ", ".join(_describe_region(c.tensor, c.index) for c in self.comm.chunks[slot])
        return f"chunk {slot} ({regions})"

    def regions(self, tile: int) -> list:
        fn = self.problem0.tile_regions
        return fn(tile) if fn is not None else _default_regions(self.problem0, tile)

    def unwritten(self, problem: CheckProblem, name: str, index: tuple) -> bool:
        now = problem.tensors[name][index]
        ref = self.reference.get(name)
        mask = self.torch.isposinf(now)
        if ref is not None:
            mask &= ~self.torch.isposinf(ref[index])
        return bool(mask.any())

    def _add(self, finding: Finding) -> None:
        if all((f.kind, f.tile, f.chunk) != (finding.kind, finding.tile, finding.chunk) for f in self.findings):
            self.findings.append(finding)

    # runs
    def run_reference(self) -> None:
        problem = self._problem(self.seeds[0])
        self.original[problem.grid_original](*problem.args, **problem.meta)
        self.reference = {n: problem.tensors[n].clone() for n in problem.outputs}
        self.runs += 1

    def run_transformed(self, order: list, late: set) -> None:
        from syncopate import _check_sites
        from syncopate.launch import TileTables, launch

        torch = self.torch
        problem = self._problem(self.seeds[0])
        self.order = order
        tables = TileTables.from_lists(
            order,
            problem.tiles_n,
            self.comm.tile_waits,
            self.comm.tile_notifies,
            self.comm.slot_writers,
            list(range(len(self.comm.slot_writers))),
        )
        signals = torch.zeros(len(self.comm.slot_writers), dtype=torch.int32)
        truth = {}
        for slot in self.comm.consumed:
            if slot in late:
                truth[slot] = []
                for chunk in self.comm.chunks[slot]:
                    t = problem.tensors[chunk.tensor]
                    if not t.is_floating_point():
                        raise UserError(
                            f"check: consumed tensor {chunk.tensor!r} must be floating-point "
                            "(a late chunk holds NaN until it lands)"
                        )
                    truth[slot].append((chunk, t[chunk.index].clone()))
                    t[chunk.index] = float("nan")
            else:
                signals[slot] = self.comm.slot_writers[slot]
        run = _Run(self, problem, signals, late, truth)
        _check_sites._RUNS[signals.data_ptr()] = run
        try:
            launch(
                self.transformed,
                problem.grid_transformed,
                tables,
                *problem.args,
                signals=signals,
                epoch=1,
                wait_bound_ns=_WAIT_BOUND_NS,
                **problem.meta,
            )
        except WaitTimeoutError as exc:
            self._add(Finding("timeout", -1, -1, f"a wait timed out: {exc}"))
        finally:
            del _check_sites._RUNS[signals.data_ptr()]
        self.runs += 1
        for f in run.findings:
            self._add(f)
        self._judge(problem, run, late)

    def _judge(self, problem: CheckProblem, run: _Run, late: set) -> None:
        torch = self.torch
        for tile in range(self.num_tiles):
            for name, index in self.regions(tile):
                now, ref = problem.tensors[name][index], self.reference[name][index]
                poisoned = torch.isnan(now) & ~torch.isnan(ref)
                if poisoned.any() and late:
                    for slot in sorted(late):
                        if slot in self.comm.tile_waits[tile]:
                            lander = run.landed_by.get(slot)
                            how = (
                                "its own wait landed it"
                                if lander == tile
                                else "it never waited for it"
                                if tile not in run.waited
                                else f"it was landed by {self.tile_text(lander)}"
                                if lander is not None
                                else "no tile waited for it"
                            )
                            self._add(
                                Finding(
                                    "read-before-wait",
                                    tile,
                                    slot,
                                    f"{self.tile_text(tile)} read {self.chunk_text(slot)} before "
                                    f"waiting for it ({how}): its "
                                    f"{_describe_region(name, index)} holds NaN",
                                )
                            )
                        else:
                            self._add(
                                Finding(
                                    "unlisted-read",
                                    tile,
                                    slot,
                                    f"{self.tile_text(tile)} read {self.chunk_text(slot)}, which is "
                                    "not in its wait list (the consume annotation's m=/n=/m_dim do "
                                    f"not describe what it reads): its {_describe_region(name, index)} "
                                    "holds NaN",
                                )
                            )
                    continue
                if late:
                    continue  # a late run only looks for reads of the late chunk
                if self.unwritten(problem, name, index):
                    self._add(
                        Finding(
                            "unwritten", tile, -1, f"{self.tile_text(tile)} never wrote {_describe_region(name, index)}"
                        )
                    )
                elif not torch.equal(torch.nan_to_num(now, posinf=0.0), torch.nan_to_num(ref, posinf=0.0)):
                    diff = (now.float() - ref.float()).abs().max().item()
                    self._add(
                        Finding(
                            "wrong-result",
                            tile,
                            -1,
                            f"{self.tile_text(tile)} wrote {_describe_region(name, index)} unlike the "
                            f"untransformed kernel (max abs difference {diff:.3g})",
                        )
                    )
        for tile in range(self.num_tiles):
            if self.comm.tile_waits[tile] and tile not in run.waited:
                self._add(
                    Finding(
                        "never-waited",
                        tile,
                        -1,
                        f"{self.tile_text(tile)} never waited (its wait list has "
                        f"{len(self.comm.tile_waits[tile])} chunks): the consume annotation is "
                        "not on its path",
                    )
                )
            count = run.notified.get(tile, 0) if self.comm.tile_notifies[tile] else 1
            if count != 1:
                self._add(
                    Finding("notify-count", tile, -1, f"{self.tile_text(tile)} notified {count} times, expected once")
                )
        for slot in self.comm.produced:
            got, want = int(run.signals[slot]), self.comm.slot_writers[slot]
            if got != want:
                self._add(
                    Finding(
                        "notify-count", -1, slot, f"{self.chunk_text(slot)} was raised {got} times, expected {want}"
                    )
                )

    def orders(self, count: int) -> list:
        out = []
        for seed in self.seeds:
            order = list(range(self.num_tiles))
            random.Random(seed + 17).shuffle(order)
            out += [order, order[::-1]][:count]
        return out


def check_transformed(
    original, transformed, problem: Callable, *, world: int = 2, seeds: Sequence[int] = (0,), orders: int = 2
) -> CheckReport:
    """Checks `transformed` (loaded with load_transformed, or transformed with
    language_module=CHECK_LANGUAGE_MODULE) against `original`; `problem(generator)` makes a
    fresh CheckProblem per run. orders: per seed, a shuffled tile order (1) and its reverse (2).
    Needs TRITON_INTERPRET=1."""
    _require_interpreter()
    if orders not in (1, 2):
        raise UserError(f"check: orders must be 1 or 2, got {orders}")
    with _interpreter_index_fix():
        checker = _Checker(original, transformed, problem, world, seeds)
        checker.run_reference()
        for order in checker.orders(orders):
            checker.run_transformed(order, set())
            for slot in checker.comm.consumed:
                checker.run_transformed(order, {slot})
    return CheckReport(
        checker.info["kernel"], checker.num_tiles, len(checker.comm.slot_writers), checker.runs, checker.findings
    )


def _load_problem(spec: str) -> Callable:
    """'file.py:function' or 'package.module:function'."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not attr:
        raise UserError(f"check: problem {spec!r}: expected 'file.py:function' or 'module:function'")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UserError(f"check: problem file {target!r} does not exist")
        module = _load_module(path.resolve(), _module_name(path.stem, "problem"))
    else:
        module = importlib.import_module(target)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError(f"check: {target} has no function {attr!r}")
    return fn


def check_kernel(
    source: Union[str, os.PathLike],
    kernel: str,
    problem: Union[Callable, str],
    *,
    filename: Optional[str] = None,
    world: int = 2,
    seeds: Sequence[int] = (0,),
    orders: int = 2,
    plan: Any = None,
) -> CheckReport:
    """Transforms `kernel` of `source` (a path, or the text with `filename`) and checks it (see the
    module doc). `problem` is a function generator -> CheckProblem, or 'file.py:function' /
    'module:function'; given as a string, the check runs in a subprocess when this process does
    not use Triton's interpreter. Raises TransformError if the transformer refuses the kernel."""
    path: Optional[Path] = None
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and Path(source).suffix == ".py"
    ):
        path = Path(source)
        if not path.is_file():
            raise UserError(f"check: kernel file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
        filename = filename or str(path)
    else:
        text = str(source)
        filename = filename or "kernel.py"
    if not interpreter_active():
        if not isinstance(problem, str):
            _require_interpreter()
        return _check_in_subprocess(text, filename, path, kernel, problem, world, seeds, orders, plan)
    make = _load_problem(problem) if isinstance(problem, str) else problem
    if path is None:
        directory = Path(tempfile.mkdtemp(prefix="syncopate-check-"))
        path = directory / Path(filename).name
        path.write_text(text, encoding="utf-8")
    original = getattr(_load_module(path.resolve(), _module_name(path.stem, "original")), kernel)
    transformed = _transform_for_check(text, filename, kernel, plan)
    return check_transformed(original, transformed, make, world=world, seeds=seeds, orders=orders)


def _check_in_subprocess(text, filename, path, kernel, problem, world, seeds, orders, plan) -> CheckReport:
    with tempfile.TemporaryDirectory(prefix="syncopate-check-") as tmp:
        if path is None:
            path = Path(tmp) / Path(filename).name
            path.write_text(text, encoding="utf-8")
        cmd = [
            sys.executable,
            "-m",
            "syncopate.check",
            str(path),
            "--kernel",
            kernel,
            "--problem",
            problem,
            "--world",
            str(world),
            "--seeds",
            ",".join(str(s) for s in seeds),
            "--orders",
            str(orders),
            "--json",
        ]
        if plan is not None:
            plan_path = Path(tmp) / "plan.json"
            from syncopate import _core

            plan_path.write_text(_core.plan_to_json(plan), encoding="utf-8")
            cmd += ["--plan", str(plan_path)]
        env = dict(os.environ, TRITON_INTERPRET="1")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise UserError(f"check: the checking subprocess failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return CheckReport.from_json(json.loads(done.stdout))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """python -m syncopate.check KERNEL_FILE --kernel NAME --problem file.py:function ..."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m syncopate.check",
        description="Run a transformed kernel with late chunks under Triton's "
        "interpreter; report reads before waits and notifies "
        "before stores (docs/ANNOTATIONS.md, 'Checking mode').",
    )
    parser.add_argument("kernel_file")
    parser.add_argument(
        "--kernel",
        "-k",
        required=True,
        action="append",
        help="kernel name (repeat, or a,b, for several kernels of the file)",
    )
    parser.add_argument(
        "--problem",
        required=True,
        action="append",
        help="file.py:function making a CheckProblem (one per kernel, or one for all)",
    )
    parser.add_argument("--world", type=int, default=2, help="chunks per annotated tensor (default 2)")
    parser.add_argument("--seeds", default="0", help="comma-separated order seeds (default 0)")
    parser.add_argument(
        "--orders",
        type=int,
        default=2,
        choices=(1, 2),
        help="tile orders per seed: a shuffled one (1), and its reverse (2, default)",
    )
    parser.add_argument("--plan", help="plan JSON the transformer checks tensors against")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    kernels = [k for item in args.kernel for k in item.split(",") if k]
    if len(args.problem) not in (1, len(kernels)):
        parser.error(f"{len(kernels)} kernels but {len(args.problem)} --problem values (give one, or one per kernel)")
    problems = args.problem * len(kernels) if len(args.problem) == 1 else args.problem
    try:
        plan = None
        if args.plan:
            from syncopate import _core

            plan = _core.load_plan(args.plan)
        seeds = [int(s) for s in args.seeds.split(",") if s]
        reports = [
            check_kernel(Path(args.kernel_file), k, p, world=args.world, seeds=seeds, orders=args.orders, plan=plan)
            for k, p in zip(kernels, problems)
        ]
    except Exception as exc:  # noqa: BLE001 - every error is reported, with its type
        from syncopate.errors import Error

        print(f"error: {exc}" if isinstance(exc, Error) else f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UserError) else 1
    if args.json:
        data = [r.to_json() for r in reports]
        print(json.dumps(data[0] if len(data) == 1 else data))
    else:
        for r in reports:
            print(r)
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # Run the package's module, not this __main__ copy: a problem file's CheckProblem is
    # syncopate.check.CheckProblem.
    from syncopate import check as _check

    sys.exit(_check.main())
