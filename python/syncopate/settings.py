"""Every environment variable the Python package reads, typed, in one place (in the style of
Triton's `triton.knobs`). docs/PYTHON.md, "Settings", has the table, with the C++ side's
(include/syncopate/common/settings.hpp).

    from syncopate.settings import env
    env.backend             # str: $SYNCOPATE_BACKEND, read now
    env.wait_bound_ms       # int

An attribute reads the environment each time it is read. Where a value is fixed at import, the
module that fixes it reads it once at import (its `read` below says where); everything else is
read per call, so a test or a script may change the variable between calls.
"""

from __future__ import annotations

import os
from typing import Callable, Generic, Optional, TypeVar

from syncopate.errors import UserError

T = TypeVar("T")


def _flag(text: str) -> bool:
    """Unset, empty or "0" is off; anything else is on."""
    return text not in ("", "0")


class Setting(Generic[T]):
    """One environment variable: its name, its text when unset, how the text becomes a value,
    when the package reads it, and what it does (the last three also fill the docs table)."""

    def __init__(
        self, name: str, type_name: str, default: Optional[str], parse: Callable[[str], T], read: str, doc: str
    ):
        self.name, self.type_name, self.default, self.parse = name, type_name, default, parse
        self.read, self.doc = read, doc

    def value(self) -> Optional[T]:
        text = os.environ.get(self.name, self.default)
        return None if text is None else self.parse(text)

    def __get__(self, obj, owner=None):
        return self if obj is None else self.value()


def _milliseconds(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise UserError(f"${name}={text!r}: expected a whole number of milliseconds") from None

    return parse


class Env:
    """The settings; read them through the instance `env`."""

    backend = Setting(
        "SYNCOPATE_BACKEND",
        "str",
        "auto",
        str,
        "per call",
        "chunk backend of the contexts the torch custom ops (`syncopate.ops.*`) make: `auto`, "
        "`copy-engine`, `sm-copy` or `nccl`",
    )
    check_each_call = Setting(
        "SYNCOPATE_CHECK_EACH_CALL",
        "bool",
        "0",
        _flag,
        "at import of `syncopate.ops`",
        "default of a context call's `check=`: `1` synchronizes after each call and raises a "
        "timed-out wait at once (a debugging aid); off, a call stays asynchronous and a timed-out "
        "wait of an earlier call is raised by a later call or by `check()`",
    )
    wait_bound_ms = Setting(
        "SYNCOPATE_WAIT_BOUND_MS",
        "int",
        "10000",
        _milliseconds("SYNCOPATE_WAIT_BOUND_MS"),
        "at import of `syncopate.runtime`",
        "default bound of every device wait of the ops and `PlanWorkspace` (`wait_bound_ns=`), in ms",
    )
    auto_staged = Setting(
        "SYNCOPATE_AUTO_STAGED",
        "bool",
        "0",
        _flag,
        "per call",
        "lets `reduce=\"auto\"` of GemmRs / GemmAr choose the staged epilogue (docs/RUNTIME.md, \"Staged epilogue\")",
    )
    calibration = Setting(
        "SYNCOPATE_CALIBRATION",
        "str",
        None,
        str,
        "per call",
        "the simulator calibration of the ops' auto choice (a shipped name or a `.json` path; "
        "unset: `h200`) and of `python -m syncopate.demo` (a `.json` path)",
    )
    nodes = Setting(
        "SYNCOPATE_NODES",
        "str",
        None,
        str,
        "per context",
        "the node of each global rank when a context's `nodes=` is not given: a node count (\"2\": "
        "consecutive ranks) or one node id per global rank (\"0,0,1,1\") (`ops/topology.py`)",
    )
    world_size = Setting(
        "WORLD_SIZE",
        "str",
        None,
        str,
        "per context",
        "torchrun's own variable, read here too: the global world size the node ids above and "
        "`LOCAL_WORLD_SIZE` divide (`ops/topology.py`)",
    )
    local_world_size = Setting(
        "LOCAL_WORLD_SIZE",
        "str",
        None,
        str,
        "per context",
        "torchrun's own variable, read here too: ranks per node, global rank g on node g // it, "
        "when neither `nodes=` nor `SYNCOPATE_NODES` is given (`ops/topology.py`)",
    )
    triton_interpret = Setting(
        "TRITON_INTERPRET",
        "bool",
        "0",
        _flag,
        "per call (`syncopate.language`: at import)",
        "Triton's own switch, read here too: kernels run in Triton's CPU interpreter, so the ops "
        "accept CPU tensors and `syncopate.check` runs",
    )


env = Env()

# Every setting, for the docs table and its test.
SETTINGS = tuple(s for s in vars(Env).values() if isinstance(s, Setting))
