"""Local (single-GPU) Triton kernels that Syncopate's transformer turns into overlapped ones."""

from .configs import CANDIDATES, GemmConfig, choose_config
from .gemm import gemm, linear, select_config
from .gemm_fp8 import gemm_fp8

__all__ = ["CANDIDATES", "GemmConfig", "choose_config", "gemm", "gemm_fp8", "linear", "select_config"]
