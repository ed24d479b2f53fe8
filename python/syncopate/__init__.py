"""Syncopate: compute-communication overlap inside one fused multi-GPU kernel.

    import syncopate as sy
    plan = sy.make_plan("all-gather", world_size=4, shape=[8192, 4096], split=2)
    sy.verify_or_raise(plan)                      # PlanVerifyError lists every violation
    ported = sy.import_plan("ring.xml", format="msccl-xml", shape=[8192, 4096])   # .plan, .origins
    tables = sy.lower(plan, sy.TileGrid(m=8192, n=4096), [sy.TileAccess("x", "consume", 0, -1)])

The plan / verify / lower / schedule / simulate / transform functions are bindings to the C++
core (`syncopate._core`, CPU only: it imports with no GPU or driver). C++ errors arrive as the
exceptions of `syncopate.errors`, re-exported here. The GPU parts load on first use:
`sy.ops` (torch custom ops ag_gemm, gemm_rs, gemm_ar; needs torch), `sy.nn` (tensor-parallel
ColumnParallelLinear / RowParallelLinear on them), `sy.language` (Triton
device primitives), `sy.runtime` (symmetric heap, signals, backends; needs the CUDA build).
"""

import importlib as _importlib

from syncopate.errors import (
    CalibrationError,
    DeviceError,
    Error,
    InternalError,
    PlanParseError,
    PlanVerifyError,
    ShapeError,
    TransformError,
    UserError,
    WaitTimeoutError,
)

try:
    from syncopate import _core
except ImportError as _error:  # e.g. the source tree python/ on sys.path instead of an install
    raise ImportError(
        f"syncopate._core, the compiled C++ core, cannot be loaded from {__path__[0]} ({_error}); "
        "install the package (pip install .) instead of importing it from the source tree"
    ) from _error
from syncopate._core import (
    DEFAULT_MIN_GAIN,
    DEFAULT_MIN_SAVING_US,
    AddedParam,
    AnnotatedAccess,
    AttentionPrediction,
    Box,
    Calibration,
    Candidate,
    Chunk,
    ChunkTiming,
    CollectiveSpec,
    CommPlan,
    GemmShape,
    ImportedPlan,
    Prediction,
    RankProgram,
    SignalSlot,
    SignalTable,
    SignalTableArrays,
    TensorSpec,
    TileAccess,
    TileGrid,
    TileOrder,
    TileTiming,
    Timeline,
    TransformResult,
    TuneResult,
    VerifyReport,
    Violation,
    added_params,
    default_accesses,
    estimate_arrival,
    export_msccl_xml,
    import_plan,
    load_calibration,
    load_plan,
    lower,
    make_moe_dispatch_plan,
    make_plan,
    make_zigzag_gather_plan,
    moe_rows_chunk,
    parse_calibration,
    parse_plan,
    plan_to_json,
    predict_attention,
    save_plan,
    signal_tables_to_json,
    simulate,
    tile_order,
    tile_orders_to_json,
    transform,
    transform_kernels,
    tune,
    verify,
    verify_or_raise,
)

__version__ = "0.1.0"

# The public API (the lazy submodules below are reached as attributes: sy.ops, sy.nn, ...).
__all__ = [
    "CalibrationError",
    "DeviceError",
    "Error",
    "InternalError",
    "PlanParseError",
    "PlanVerifyError",
    "ShapeError",
    "TransformError",
    "UserError",
    "WaitTimeoutError",
    "DEFAULT_MIN_GAIN",
    "DEFAULT_MIN_SAVING_US",
    "AddedParam",
    "AnnotatedAccess",
    "AttentionPrediction",
    "Box",
    "Calibration",
    "Candidate",
    "Chunk",
    "ChunkTiming",
    "CollectiveSpec",
    "CommPlan",
    "GemmShape",
    "ImportedPlan",
    "Prediction",
    "RankProgram",
    "SignalSlot",
    "SignalTable",
    "SignalTableArrays",
    "TensorSpec",
    "TileAccess",
    "TileGrid",
    "TileOrder",
    "TileTiming",
    "Timeline",
    "TransformResult",
    "TuneResult",
    "VerifyReport",
    "Violation",
    "added_params",
    "default_accesses",
    "estimate_arrival",
    "export_msccl_xml",
    "import_plan",
    "load_calibration",
    "load_plan",
    "lower",
    "make_moe_dispatch_plan",
    "make_plan",
    "make_zigzag_gather_plan",
    "moe_rows_chunk",
    "parse_calibration",
    "parse_plan",
    "plan_to_json",
    "predict_attention",
    "save_plan",
    "signal_tables_to_json",
    "simulate",
    "tile_order",
    "tile_orders_to_json",
    "transform",
    "transform_kernels",
    "tune",
    "verify",
    "verify_or_raise",
    "calibration",
    "check_kernel",
    "__version__",
]


def calibration(name_or_path="h200"):
    """A simulator calibration: one shipped with the package by name ("h200"), or a JSON file.

    Raises CalibrationError naming the JSON path when the file is malformed, and UserError
    listing the shipped names when a name is unknown.
    """
    import os
    from pathlib import Path

    path = Path(os.fspath(name_or_path))
    if path.suffix != ".json" and len(path.parts) == 1:
        shipped = Path(__file__).resolve().parent / "calib"
        path = shipped / f"{path.name}.json"
        if not path.is_file():
            names = sorted(p.stem for p in shipped.glob("*.json")) if shipped.is_dir() else []
            raise UserError(
                f"calibration {name_or_path!r}: no such shipped calibration; "
                f"shipped: {', '.join(names) or 'none'}; or pass a path to a .json file"
            )
    return _core.load_calibration(path)


# Submodules that need torch, triton or the CUDA build: imported on first attribute access so
# that `import syncopate` stays cheap and works on a CPU-only machine.
_LAZY_SUBMODULES = frozenset({"ops", "nn", "language", "runtime", "launch", "kernels", "check"})


def check_kernel(source, kernel, problem, **options):
    """Runs the transformed `kernel` of `source` under Triton's interpreter with late chunks and
    reports tiles that read a chunk before waiting for it or notified before storing (a
    syncopate.check.CheckReport; see that module, and docs/ANNOTATIONS.md, "Checking mode")."""
    from syncopate.check import check_kernel as _check_kernel

    return _check_kernel(source, kernel, problem, **options)


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module(f"syncopate.{name}")
    raise AttributeError(f"module 'syncopate' has no attribute '{name}'")
