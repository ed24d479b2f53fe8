"""Each C++ error class arrives in Python as its own syncopate.* exception, message intact."""

import re
from pathlib import Path

import pytest

import syncopate
from syncopate import _core

# C++ class (include/syncopate/common/error.hpp) -> the Python bases it must have besides Error.
CLASSES = {
    "PlanParseError": (syncopate.UserError, ValueError),
    "PlanVerifyError": (syncopate.UserError, ValueError),
    "ShapeError": (syncopate.UserError, ValueError),
    "TransformError": (syncopate.UserError, ValueError),
    "CalibrationError": (syncopate.UserError, ValueError),
    "UserError": (ValueError,),
    "WaitTimeoutError": (TimeoutError,),
    "DeviceError": (RuntimeError,),
    "InternalError": (RuntimeError,),
    "Error": (),
}


def test_the_table_lists_every_class_of_error_hpp():
    header = Path(__file__).resolve().parents[2] / "include" / "syncopate" / "common" / "error.hpp"
    assert set(re.findall(r"^class (\w+) : public", header.read_text(), re.M)) == set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_cpp_class_maps_to_its_own_exception(name):
    message = f"plan.json: rank 2, chunk 17: coverage/missing-shard: {name} detail"
    with pytest.raises(syncopate.Error) as info:
        _core._raise_error(name, message)
    assert type(info.value) is getattr(syncopate, name)
    assert str(info.value) == message


@pytest.mark.parametrize("name,bases", sorted(CLASSES.items()))
def test_hierarchy(name, bases):
    cls = getattr(syncopate, name)
    assert issubclass(cls, syncopate.Error)
    for base in bases:
        assert issubclass(cls, base), f"{name} should subclass {base.__name__}"
    if name in ("WaitTimeoutError", "DeviceError", "InternalError", "Error"):
        assert not issubclass(cls, ValueError), f"{name} is not a user error"


def test_exported_names_match_errors_module():
    import syncopate.errors as errors

    # Every class of common/error.hpp.
    assert set(errors.__all__) == set(CLASSES)
    for name in errors.__all__:
        assert getattr(syncopate, name) is getattr(errors, name)


def test_calibration_error_keeps_its_class_once_the_runtime_module_is_loaded():
    """Loading syncopate._runtime registers the package's translator again (nanobind shares
    translators between modules, newest first); CalibrationError must still arrive as itself,
    not as the UserError it derives from."""

    def raised():
        with pytest.raises(syncopate.UserError, match=r"^mine\.json: ") as info:
            syncopate.parse_calibration("{}", "mine.json")
        return type(info.value)

    assert raised() is syncopate.CalibrationError
    try:
        from syncopate import _runtime  # noqa: F401
    except ImportError as error:  # a build without the CUDA toolkit has no _runtime
        pytest.skip(f"syncopate._runtime not built: {error}")
    assert raised() is syncopate.CalibrationError
    with pytest.raises(syncopate.Error) as info:
        _core._raise_error("CalibrationError", "calib.json: sms: must be > 0")
    assert type(info.value) is syncopate.CalibrationError


def test_non_syncopate_cpp_errors_keep_nanobind_mapping():
    # std::invalid_argument is not a syncopate::Error: nanobind maps it to a plain ValueError.
    with pytest.raises(ValueError) as info:
        _core._raise_error("NoSuchClass", "x")
    assert not isinstance(info.value, syncopate.Error)
    assert "NoSuchClass" in str(info.value)


# The real library paths, one per user-error class that the CPU core raises.


def test_parse_error_from_loader():
    with pytest.raises(syncopate.PlanParseError, match=r"mine\.json"):
        syncopate.parse_plan('{"version": 1', "mine.json")


def test_parse_error_names_the_json_path():
    plan = syncopate.make_plan("all-gather", world_size=2, shape=[8, 4])
    data = plan.to_dict()
    data["chunks"][1]["box"]["offset"][0] = "x"
    with pytest.raises(syncopate.PlanParseError, match=r"chunks\[1\]\.box\.offset\[0\]"):
        syncopate.CommPlan.from_dict(data)


def test_verify_error_lists_rank_chunk_rule():
    plan = syncopate.make_plan("all-gather", world_size=3, shape=[9, 4])
    data = plan.to_dict()
    dropped = data["ranks"][0]["streams"][0].pop()
    with pytest.raises(syncopate.PlanVerifyError, match=rf"mine\.json: rank \d+, chunk {dropped}: well-formed/"):
        syncopate.verify_or_raise(syncopate.CommPlan.from_dict(data), "mine.json")


def test_shape_error_from_templates():
    with pytest.raises(syncopate.ShapeError, match=r"dim 0 of size 3 .* 4 ranks x 2 sub-chunks"):
        syncopate.make_plan("all-gather", world_size=4, shape=[3], split=2)


def test_user_error_from_enum_spelling():
    with pytest.raises(
        syncopate.UserError,
        match=r"argument 'backend': unknown backend 'pcie'; expected one of: copy-engine, sm-copy, nccl",
    ):
        syncopate.make_plan("all-gather", world_size=2, shape=[8], backend="pcie")
