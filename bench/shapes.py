"""The problem shapes every benchmark in bench/ runs: one list, so the GEMM and op tables line up.

Shapes are (M, K, N) of the *whole* tensor-parallel op:
- AG+GEMM: A [M, K] sharded along M, gathered, times B [K, N]; the local GEMM is M x K x N.
- GEMM+RS / GEMM+AR: K sharded; the local GEMM is M x K/w x N, its output reduced over ranks.
B is stored [K, N] for the baselines' rows and [N, K] (nn.Linear weight) for model rows.
"""

from __future__ import annotations

import dataclasses

# Baselines table rows (M, K, N).
BASELINE = ((8192, 8192, 8192), (16384, 8192, 4096), (4096, 8192, 28672), (32768, 4096, 4096))
# Small-M / LLaMA-3-70B-like rows of the baselines (world 2).
SMALL_M = (
    (256, 8192, 8192),
    (1024, 8192, 8192),
    (2048, 8192, 3584),
    (8192, 8192, 2560),
    (8192, 8192, 14336),
    (8192, 7168, 8192),
)


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    intermediate: int
    q_heads: int
    kv_heads: int
    head_dim: int


LLAMA3_70B = Model("llama3-70b", 8192, 28672, 64, 8, 128)
LLAMA3_8B = Model("llama3-8b", 4096, 14336, 32, 8, 128)
MODEL_TOKENS = (4096, 8192)
DECODE_TOKENS = (128, 512, 1024)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One tensor-parallel op at one world size."""

    op: str  # "ag_gemm" (column parallel) or "gemm_rs" (row parallel; gemm_ar uses the same)
    world: int
    m: int
    k: int
    n: int
    b_layout: str  # "kn" or "nk" (nn.Linear weight)
    label: str

    def local_gemm(self) -> tuple[int, int, int]:
        """(M, K, N) of the GEMM each rank runs."""
        if self.op == "ag_gemm":
            return self.m, self.k, self.n
        return self.m, self.k // self.world, self.n


def _model_problems(model: Model, world: int, tokens: int) -> list[Problem]:
    """The four GEMMs of one transformer layer under tensor parallelism of degree `world`.

    Column-parallel layers (QKV, gate+up) shard N and are fed by an all-gather of the
    sequence-parallel activations; row-parallel ones (O, down) shard K and end in a
    reduce-scatter. Each Problem's N (column) is the per-rank slice: that is the GEMM run.
    """
    qkv = (model.q_heads + 2 * model.kv_heads) * model.head_dim
    tag = f"{model.name} w{world} M{tokens}"
    return [
        Problem("ag_gemm", world, tokens, model.hidden, qkv // world, "nk", f"{tag} qkv"),
        Problem("ag_gemm", world, tokens, model.hidden, 2 * model.intermediate // world, "nk", f"{tag} gate_up"),
        Problem("gemm_rs", world, tokens, model.q_heads * model.head_dim, model.hidden, "nk", f"{tag} o_proj"),
        Problem("gemm_rs", world, tokens, model.intermediate, model.hidden, "nk", f"{tag} down"),
    ]


def op_problems(world: int) -> list[Problem]:
    """Every op row for one world size: baselines, small M, model layers, decode sizes."""
    rows: list[Problem] = []
    for m, k, n in BASELINE:
        rows.append(Problem("ag_gemm", world, m, k, n, "kn", "baseline"))
        rows.append(Problem("gemm_rs", world, m, k, n, "kn", "baseline"))
    for m, k, n in SMALL_M:
        rows.append(Problem("ag_gemm", world, m, k, n, "kn", "small-M"))
        rows.append(Problem("gemm_rs", world, m, k, n, "kn", "small-M"))
    for model in (LLAMA3_70B, LLAMA3_8B):
        for tokens in MODEL_TOKENS:
            rows.extend(_model_problems(model, world, tokens))
        for tokens in DECODE_TOKENS:
            rows.extend(p for p in _model_problems(model, world, tokens) if world == 2)
    return [p for p in rows if p.m % world == 0 and p.k % world == 0]


@dataclasses.dataclass(frozen=True)
class GemmShape:
    m: int
    k: int
    n: int
    b_layout: str
    labels: tuple[str, ...]


def local_gemm_shapes(worlds: tuple[int, ...] = (2, 4)) -> list[GemmShape]:
    """The distinct local GEMMs of every op row at these world sizes, in first-seen order."""
    seen: dict[tuple[int, int, int, str], list[str]] = {}
    for world in worlds:
        for p in op_problems(world):
            key = (*p.local_gemm(), p.b_layout)
            seen.setdefault(key, []).append(f"{p.op} w{p.world} {p.label} {p.m}x{p.k}x{p.n}")
    return [GemmShape(m, k, n, layout, tuple(labels)) for (m, k, n, layout), labels in seen.items()]


OPS = ("ag_gemm", "gemm_rs", "gemm_ar")


def op_rows(world: int, ops=OPS) -> list[tuple[Problem, str]]:
    """(problem, op) pairs in table order; gemm_ar runs on gemm_rs's rows (same inputs)."""
    return [(p, op) for p in op_problems(world) for op in ops if (op == "ag_gemm") == (p.op == "ag_gemm")]


def parse_slice(text: str) -> slice:
    """ "i:j", "i:" or ":j" (Python slice bounds, no step) -> slice; ValueError naming the rule."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"--rows {text!r}: expected i:j (e.g. 0:12, 5:, :3)")
    try:
        lo, hi = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise ValueError(f"--rows {text!r}: bounds must be integers") from None
    return slice(lo, hi)


def select_rows(
    rows: list[tuple[Problem, str]],
    *,
    quick: bool = False,
    labels: tuple[str, ...] = (),
    row_slice: slice | None = None,
    max_rows: int | None = None,
) -> list[tuple[Problem, str]]:
    """The rows to run, in this order: --quick keeps the baselines rows, --labels keeps rows
    whose label contains any of the substrings, --rows slices what is left (the indices that
    --list prints with the same filters), --max-rows keeps the first n."""
    if quick:
        rows = [r for r in rows if r[0].label == "baseline"]
    if labels:
        rows = [r for r in rows if any(s in r[0].label for s in labels)]
    if row_slice is not None:
        rows = rows[row_slice]
    if max_rows is not None:
        rows = rows[:max_rows]
    return rows
