"""Finding the syncopate package from a checkout, installed or not.

The benchmarks run on machines where the package may not be installed (a bare device machine
gets a copy of the working tree). The local kernels are pure Python + Triton, so when
`import syncopate` fails (not installed, or its compiled bindings not built) they are loaded
straight from python/syncopate/kernels/ of this checkout.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
_KERNELS_DIR = REPO / "python" / "syncopate" / "kernels"


def load_kernels() -> tuple[ModuleType, str]:
    """(the syncopate.kernels module, how it was found)."""
    try:
        return importlib.import_module("syncopate.kernels"), "installed package"
    except ImportError as error:
        reason = f"import syncopate.kernels failed ({error})"
    name = "syncopate_local_kernels"
    if name in sys.modules:
        return sys.modules[name], f"{_KERNELS_DIR} ({reason})"
    spec = importlib.util.spec_from_file_location(
        name, _KERNELS_DIR / "__init__.py", submodule_search_locations=[str(_KERNELS_DIR)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, f"{_KERNELS_DIR} ({reason})"


def load_ops() -> tuple[ModuleType | None, str]:
    """(syncopate.ops or None, why not): the fused ops need the built runtime."""
    python_dir = str(REPO / "python")
    if python_dir not in sys.path:
        sys.path.append(python_dir)
    try:
        return importlib.import_module("syncopate.ops"), "syncopate.ops imported"
    except Exception as error:  # a missing extension raises ImportError or OSError
        return None, f"syncopate.ops not importable: {type(error).__name__}: {error}"
