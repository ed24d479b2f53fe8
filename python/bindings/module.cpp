// The `syncopate._core` extension module: CPU-only bindings to the C++ core. It never touches a
// GPU or the CUDA driver, so it imports on any machine. Layers are bound as their libraries
// exist in the build (python/CMakeLists.txt defines SYNCOPATE_BIND_<LAYER>); `layers` lists them.
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

  nb::list layers;
  syncopate::python::bind_plan(m);
  layers.append("plan");
#ifdef SYNCOPATE_BIND_LOWER
  syncopate::python::bind_lower(m);
  layers.append("lower");
#endif
#ifdef SYNCOPATE_BIND_SCHEDULE
  syncopate::python::bind_schedule(m);
  layers.append("schedule");
#endif
#ifdef SYNCOPATE_BIND_SIM
  syncopate::python::bind_sim(m);
  layers.append("sim");
#endif
#ifdef SYNCOPATE_BIND_TRANSFORM
  syncopate::python::bind_transform(m);
  layers.append("transform");
#endif
  m.attr("layers") = nb::tuple(layers);
}
