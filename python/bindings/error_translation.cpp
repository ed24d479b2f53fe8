#include "error_translation.hpp"

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nanobind/nanobind.h>

#include "syncopate/common/error.hpp"

namespace nb = nanobind;

namespace syncopate::python {

// The class is looked up on every error rather than cached, so the module keeps no global
// state; the import is a dictionary lookup once syncopate.errors is loaded (syncopate/__init__.py
// loads it first).
void set_python_error(const char* class_name, const std::exception& error) {
  PyObject* errors_module = PyImport_ImportModule("syncopate.errors");
  PyObject* cls = errors_module ? PyObject_GetAttrString(errors_module, class_name) : nullptr;
  Py_XDECREF(errors_module);
  if (cls == nullptr) {
    // syncopate.errors is missing (a broken install): still raise, with the class name kept.
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeError, "%s: %s", class_name, error.what());
    return;
  }
  PyErr_SetString(cls, error.what());
  Py_DECREF(cls);
}

namespace {

// Most derived classes first: a PlanParseError is also a UserError and an Error. One translator
// for every class: nanobind shares translators between the package's extension modules and tries
// the latest registered first, so a second translator registered by syncopate._runtime would
// shadow this one.
void translate(const std::exception_ptr& pending, void* /*payload*/) {
  try {
    std::rethrow_exception(pending);
  } catch (const CalibrationError& e) {
    set_python_error("CalibrationError", e);
  } catch (const PlanParseError& e) {
    set_python_error("PlanParseError", e);
  } catch (const PlanVerifyError& e) {
    set_python_error("PlanVerifyError", e);
  } catch (const ShapeError& e) {
    set_python_error("ShapeError", e);
  } catch (const TransformError& e) {
    set_python_error("TransformError", e);
  } catch (const UserError& e) {
    set_python_error("UserError", e);
  } catch (const WaitTimeoutError& e) {
    set_python_error("WaitTimeoutError", e);
  } catch (const DeviceError& e) {
    set_python_error("DeviceError", e);
  } catch (const InternalError& e) {
    set_python_error("InternalError", e);
  } catch (const Error& e) {
    set_python_error("Error", e);
  }
  // Anything else propagates to nanobind's own translators (std::invalid_argument -> ValueError, ...).
}

}  // namespace

void register_error_translator() { nb::register_exception_translator(&translate); }

void throw_error_by_name(std::string_view class_name, const std::string& message) {
  if (class_name == "CalibrationError") throw CalibrationError(message);
  if (class_name == "PlanParseError") throw PlanParseError(message);
  if (class_name == "PlanVerifyError") throw PlanVerifyError(message);
  if (class_name == "ShapeError") throw ShapeError(message);
  if (class_name == "TransformError") throw TransformError(message);
  if (class_name == "UserError") throw UserError(message);
  if (class_name == "WaitTimeoutError") throw WaitTimeoutError(message);
  if (class_name == "DeviceError") throw DeviceError(message);
  if (class_name == "InternalError") throw InternalError(message);
  if (class_name == "Error") throw Error(message);
  throw std::invalid_argument("no syncopate error class named '" + std::string(class_name) + "'");
}

}  // namespace syncopate::python
