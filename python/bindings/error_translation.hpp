// Maps each C++ error class of include/syncopate/common/error.hpp to its own Python exception,
// defined in python/syncopate/errors.py (syncopate.PlanParseError, syncopate.ShapeError, ...).
//
// Every extension module of the package calls register_error_translator() once in its
// NB_MODULE body (syncopate._core does; syncopate._runtime should too), so a C++ error crossing
// into Python always arrives as the matching syncopate.* exception with the C++ message intact.
#pragma once

namespace syncopate::python {

void register_error_translator();

}  // namespace syncopate::python
