// syncopate._core: the source-to-source transformer (annotated local Triton kernel -> overlapped
// kernel source). docs/ANNOTATIONS.md defines the annotations and the output.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/transform/transform.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {

namespace {

// The binding's options; `module_paths` None: Python's own search path (sys.path), so that a
// helper is found where `import` would find it.
transform::TransformOptions options_of(const std::optional<plan::CommPlan>& plan, std::string language_module,
                                       const std::optional<std::vector<std::string>>& module_paths) {
  transform::TransformOptions options;
  options.plan = plan ? &*plan : nullptr;
  options.language_module = std::move(language_module);
  if (module_paths) {
    options.module_paths = *module_paths;
  } else {
    for (nb::handle entry : nb::module_::import_("sys").attr("path"))
      if (nb::isinstance<nb::str>(entry)) {
        std::string dir = nb::cast<std::string>(entry);
        options.module_paths.push_back(dir.empty() ? "." : dir);  // "": the working directory
      }
  }
  return options;
}

}  // namespace

void bind_transform(nb::module_& m) {
  using transform::AddedParam;
  using transform::AnnotatedAccess;
  using transform::TransformResult;

  nb::class_<AddedParam>(m, "AddedParam", "A parameter the transformer appends to the kernel.")
      .def_ro("name", &AddedParam::name)
      .def_ro("type", &AddedParam::type)
      .def_ro("meaning", &AddedParam::meaning)
      .def("__repr__", [](const AddedParam& p) { return "AddedParam(" + p.name + ": " + p.type + ")"; });

  nb::class_<AnnotatedAccess>(m, "AnnotatedAccess",
                              "A consume/produce annotation: the TileAccess lowering needs, and where.")
      .def_ro("access", &AnnotatedAccess::access)
      .def_ro("param", &AnnotatedAccess::param)
      .def_ro("line", &AnnotatedAccess::line)
      .def_ro("per_block", &AnnotatedAccess::per_block, "a @sy.consume_block: the wait is inside the loop over blocks")
      .def_ro("arrival_order", &AnnotatedAccess::arrival_order, "the loop visits its blocks in landing order");

  nb::class_<TransformResult>(m, "TransformResult")
      .def_ro("source", &TransformResult::source)
      .def_ro("kernel_name", &TransformResult::kernel_name)
      .def_ro("kernel_params", &TransformResult::kernel_params)
      .def_ro("added_params", &TransformResult::added_params)
      .def_ro("accesses", &TransformResult::accesses)
      .def_ro("tile_blocks", &TransformResult::tile_blocks)
      .def("describe_json", &transform::describe_json, "indent"_a = 2,
           "Everything but the source, as JSON (what `syncopate transform --describe` prints).")
      .def("__repr__", [](const TransformResult& r) {
        return "TransformResult(" + r.kernel_name + ", tile_blocks=" + std::to_string(r.tile_blocks) +
               ", accesses=" + std::to_string(r.accesses.size()) + ")";
      });

  m.def(
      "transform",
      [](std::string_view source, std::string_view filename, std::string_view kernel,
         std::optional<plan::CommPlan> plan, std::string language_module,
         std::optional<std::vector<std::string>> module_paths) {
        return transform::transform_kernel(source, filename, kernel,
                                           options_of(plan, std::move(language_module), module_paths));
      },
      "source"_a, "filename"_a, "kernel"_a, nb::kw_only(), "plan"_a = nb::none(),
      "language_module"_a = transform::TransformOptions{}.language_module, "module_paths"_a = nb::none(),
      "Rewrites the @triton.jit function `kernel` of `source` into the overlapped kernel. With a "
      "plan, checks the annotated tensors exist in it. Helpers the kernel imports by name are read "
      "from their modules: relative imports beside `filename` (give the file's real path), absolute "
      "ones under `module_paths` (default: sys.path), then the file's folder and its package's root. "
      "Raises TransformError naming file:line:col, the annotation and the rule.");
  m.def(
      "transform_kernels",
      [](std::string_view source, std::string_view filename, std::vector<std::string> kernels,
         std::optional<plan::CommPlan> plan, std::string language_module,
         std::optional<std::vector<std::string>> module_paths) {
        return transform::transform_kernels(source, filename, kernels,
                                            options_of(plan, std::move(language_module), module_paths));
      },
      "source"_a, "filename"_a, "kernels"_a, nb::kw_only(), "plan"_a = nb::none(),
      "language_module"_a = transform::TransformOptions{}.language_module, "module_paths"_a = nb::none(),
      "Rewrites several @triton.jit functions of `source` into one output (one import, one "
      "__syncopate__ dict naming every kernel). One TransformResult per kernel, each with the "
      "whole output as .source.");
  m.def("added_params", &transform::added_params, "The parameters every transformed kernel gets, in signature order.");
  m.attr("TRANSFORM_OUTPUT_VERSION") = transform::kOutputVersion;
  m.attr("TRANSFORM_INSERTED_MARK") = std::string(transform::kInsertedMark);
}

}  // namespace syncopate::python
