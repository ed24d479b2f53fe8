"""Local (single-GPU) Triton kernels that Syncopate's transformer turns into overlapped ones."""

from .configs import CANDIDATES, GemmConfig, choose_config
from .gemm import gemm, linear, select_config

__all__ = ["CANDIDATES", "GemmConfig", "choose_config", "gemm", "linear", "select_config"]
