// Maps each C++ error class of include/syncopate/common/error.hpp to its own Python exception, defined in
// python/syncopate/errors.py (syncopate.PlanParseError, syncopate.ShapeError, ...). One translator for every class: see
// error_translation.cpp.
//
// Every extension module of the package calls register_error_translator() once in its
// NB_MODULE body (syncopate._core does; syncopate._runtime should too), so a C++ error crossing
// into Python always arrives as the matching syncopate.* exception with the C++ message intact.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace syncopate::python {

void register_error_translator();

// Sets the pending Python exception to syncopate.errors.<class_name>(error.what()).
void set_python_error(const char* class_name, const std::exception& error);

// Throws the C++ error class named `class_name` ("PlanParseError", ..., "Error",
// "CalibrationError") with `message`;
// bound as syncopate._core._raise_error so tests can check the translation of every class.
// An unknown name throws std::invalid_argument (a Python ValueError that is not a syncopate.Error).
[[noreturn]] void throw_error_by_name(std::string_view class_name, const std::string& message);

}  // namespace syncopate::python
