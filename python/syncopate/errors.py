"""Syncopate's exceptions: one Python class per C++ error class (include/syncopate/common/error.hpp).

The extension modules translate each C++ exception into the class of the same name here, with
the C++ message unchanged (it names the place: a JSON path, file:line:col, rank and chunk, and
the rule). Errors caused by bad input also subclass ValueError, so generic code that catches
ValueError keeps working; the others subclass RuntimeError (TimeoutError for a wait that ran
past its bound).

    Error
    +-- UserError (ValueError)        bad input
    |   +-- PlanParseError            a plan that cannot be read
    |   +-- PlanVerifyError           a plan that breaks a verifier rule
    |   +-- ShapeError                shapes / template arguments that do not fit
    |   +-- TransformError            a kernel the transformer cannot rewrite
    |   +-- CalibrationError          a simulator calibration that cannot be read
    +-- WaitTimeoutError (TimeoutError)  a device-side wait ran past its bound
    +-- DeviceError (RuntimeError)    CUDA / NCCL / driver failure
    +-- InternalError (RuntimeError)  a bug in Syncopate
"""

__all__ = [
    "Error",
    "UserError",
    "PlanParseError",
    "PlanVerifyError",
    "ShapeError",
    "TransformError",
    "CalibrationError",
    "WaitTimeoutError",
    "DeviceError",
    "InternalError",
]


class Error(Exception):
    """Base class of every error Syncopate raises on purpose."""


class UserError(Error, ValueError):
    """The input was wrong; the message names the place and the rule that was broken."""


class PlanParseError(UserError):
    """A plan that cannot be read (JSON syntax, missing field, wrong type); names the JSON path."""


class PlanVerifyError(UserError):
    """A plan that reads fine but breaks a verifier rule; the message lists every violation."""


class ShapeError(UserError):
    """Shapes or template arguments that cannot work together (e.g. a dim too small to split)."""


class TransformError(UserError):
    """A kernel source the transformer cannot rewrite; names file:line:col and the annotation."""


class CalibrationError(UserError):
    """A simulator calibration file that cannot be read or holds an impossible number; names the
    JSON path (C++ syncopate::CalibrationError)."""


class WaitTimeoutError(Error, TimeoutError):
    """A device-side wait ran past its bound; names rank, slot, expected/seen values and chunk."""


class DeviceError(Error, RuntimeError):
    """A CUDA, NCCL or driver call failed at run time."""


class InternalError(Error, RuntimeError):
    """A bug in Syncopate: an invariant that valid input cannot break did break."""
