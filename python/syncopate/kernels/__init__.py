"""Local (single-GPU) Triton kernels that Syncopate's transformer turns into overlapped ones."""

import importlib

from .configs import CANDIDATES, GemmConfig, choose_config
from .gemm import gemm, linear, select_config
from .gemm_fp8 import gemm_fp8

# The modules themselves (the names gemm and gemm_fp8 above are the functions), for callers that
# need their helpers (bench/bench_gemm.py).
gemm_module = importlib.import_module(f"{__name__}.gemm")
gemm_fp8_module = importlib.import_module(f"{__name__}.gemm_fp8")
gemm_one_launch_module = importlib.import_module(f"{__name__}.gemm_one_launch")
gemm_wide_module = importlib.import_module(f"{__name__}.gemm_wide")

__all__ = ["CANDIDATES", "GemmConfig", "choose_config", "gemm", "gemm_fp8", "linear", "select_config"]
