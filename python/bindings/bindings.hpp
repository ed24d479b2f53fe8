// The pieces of the `syncopate._core` extension module, one function per layer, each in its own
// file (<layer>_bindings.cpp). module.cpp calls the ones whose layer was built.
#pragma once

#include <nanobind/nanobind.h>

namespace syncopate::python {

void bind_plan(nanobind::module_& m);       // plan IR, JSON, templates, verifier
void bind_lower(nanobind::module_& m);      // tile grids, signal tables
void bind_schedule(nanobind::module_& m);   // tile orders
void bind_sim(nanobind::module_& m);        // simulator and auto-choice
void bind_transform(nanobind::module_& m);  // source-to-source kernel transformer

}  // namespace syncopate::python
