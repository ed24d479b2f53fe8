// The `syncopate._core` extension module: CPU-only bindings to the C++ core. It never touches a
// GPU or the CUDA driver, so it imports on any machine. Every layer below the runtime is bound.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "bindings.hpp"
#include "error_translation.hpp"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "Syncopate's C++ core: plans, verifier, lowering, schedules, simulator, transformer.";
  syncopate::python::register_error_translator();
  m.def("_raise_error", &syncopate::python::throw_error_by_name, nb::arg("class_name"), nb::arg("message"),
        "Test hook: throws the named C++ error class, to check its mapping to Python.");

  syncopate::python::bind_plan(m);
  syncopate::python::bind_lower(m);
  syncopate::python::bind_schedule(m);
  syncopate::python::bind_sim(m);
  syncopate::python::bind_transform(m);
}
