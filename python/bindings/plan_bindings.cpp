// syncopate._core: the plan IR (read-only views), its JSON form, the templates, the verifier,
// and plans imported from other tools (MSCCL XML, MSCCL++ JSON, send/recv lists) or exported.
//
// A CommPlan is exposed as an immutable value: Python reads it through properties (each returns
// a copy) and makes new ones from JSON, from a dict, or from make_plan(). Editing a plan means
// editing its dict and reading it back, so every plan Python holds went through the checked
// loader and its errors name the JSON path.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "enum_arg.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/expert_parallel.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/sequence_parallel.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {
namespace {

using plan::Box;
using plan::Chunk;
using plan::CollectiveSpec;
using plan::CommPlan;
using plan::RankProgram;
using plan::TensorSpec;

std::string plan_repr(const CommPlan& p) {
  return "CommPlan(" + enum_str(p.collective.kind) + ", " + enum_str(p.collective.algorithm) +
         ", world_size=" + std::to_string(p.world_size) + ", chunks=" + std::to_string(p.chunks.size()) + ")";
}

std::string box_repr(const Box& b) {
  auto list = [](const std::vector<std::int64_t>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return "Box(offset=" + list(b.offset) + ", extent=" + list(b.extent) + ")";
}

void bind_values(nb::module_& m) {
  nb::class_<Box>(m, "Box", "An axis-aligned region: offset[d] .. offset[d] + extent[d] per dim.")
      .def_ro("offset", &Box::offset)
      .def_ro("extent", &Box::extent)
      .def("elements", &Box::elements)
      .def("overlaps", &Box::overlaps, "other"_a)
      .def("contains", &Box::contains, "inner"_a)
      .def(nb::self == nb::self)
      .def("__repr__", &box_repr);

  nb::class_<Chunk>(m, "Chunk", "One box of a tensor moving from rank src to rank dst.")
      .def_ro("id", &Chunk::id)
      .def_ro("tensor", &Chunk::tensor)
      .def_ro("box", &Chunk::box)
      .def_ro("dst_tensor", &Chunk::dst_tensor)
      .def_ro("dst_box", &Chunk::dst_box)
      .def_ro("src", &Chunk::src)
      .def_ro("dst", &Chunk::dst)
      .def_prop_ro("backend", [](const Chunk& c) { return enum_str(c.backend); })
      .def_prop_ro("op", [](const Chunk& c) { return enum_str(c.op); })
      .def_ro("stream", &Chunk::stream)
      .def_ro("deps", &Chunk::deps)
      .def_prop_ro(
          "group",
          [](const Chunk& c) -> std::optional<int> {
            if (c.group == plan::kNoGroup) return std::nullopt;
            return c.group;
          },
          "NCCL group number (issued with the rank's other members of it in one ncclGroupStart/End), or None")
      .def_prop_ro(
          "runtime_rows",
          [](const Chunk& c) -> std::optional<nb::dict> {
            if (!c.runtime_rows) return std::nullopt;
            nb::dict d;
            d["dim"] = c.runtime_rows->dim;
            d["counts"] = c.runtime_rows->counts;
            d["index"] = c.runtime_rows->index;
            return d;
          },
          "Rows known at run time: {dim, counts, index} (the box is the capacity along dim; the count is "
          "element index of the int32 tensor counts on dst), or None")
      .def(nb::self == nb::self)
      .def("__repr__", [](const Chunk& c) {
        return "Chunk(id=" + std::to_string(c.id) + ", " + c.tensor + ", " + std::to_string(c.src) + " -> " +
               std::to_string(c.dst) + ", " + enum_str(c.backend) + ", " + enum_str(c.op) + ")";
      });

  nb::class_<TensorSpec>(m, "TensorSpec")
      .def_ro("shape", &TensorSpec::shape)
      .def_prop_ro("dtype", [](const TensorSpec& t) { return enum_str(t.dtype); })
      .def_ro("layout", &TensorSpec::layout)
      .def("elements", &TensorSpec::elements)
      .def(nb::self == nb::self);

  nb::class_<CollectiveSpec>(m, "CollectiveSpec", "What the plan promises (see comm_plan.hpp).")
      .def_prop_ro("kind", [](const CollectiveSpec& c) { return enum_str(c.kind); })
      .def_ro("tensor", &CollectiveSpec::tensor)
      .def_ro("output", &CollectiveSpec::output)
      .def_ro("input", &CollectiveSpec::input)
      .def_ro("dim", &CollectiveSpec::dim)
      .def_prop_ro("algorithm", [](const CollectiveSpec& c) { return enum_str(c.algorithm); })
      .def_ro("split", &CollectiveSpec::split)
      .def(nb::self == nb::self);

  nb::class_<RankProgram>(m, "RankProgram", "One rank's chunk ids per stream, in issue order.")
      .def_ro("rank", &RankProgram::rank)
      .def_ro("streams", &RankProgram::streams)
      .def(nb::self == nb::self);
}

void bind_comm_plan(nb::module_& m) {
  nb::class_<CommPlan>(m, "CommPlan",
                       "A communication plan (immutable). Make one with make_plan(), "
                       "CommPlan.from_json(), CommPlan.from_dict() or CommPlan.load().")
      .def_ro("version", &CommPlan::version)
      .def_ro("world_size", &CommPlan::world_size)
      .def_ro("collective", &CommPlan::collective)
      .def_ro("tensors", &CommPlan::tensors)
      .def_ro("ranks", &CommPlan::ranks)
      .def_ro("chunks", &CommPlan::chunks)
      .def_ro("nodes", &CommPlan::nodes, "The node of each rank; [] when every rank is on one node.")
      .def_prop_ro("num_chunks", [](const CommPlan& p) { return p.chunks.size(); })
      .def(
          "chunk",
          [](const CommPlan& p, int id) -> Chunk {
            if (id < 0 || static_cast<std::size_t>(id) >= p.chunks.size())
              throw nb::index_error(("chunk id " + std::to_string(id) + " is out of range: the plan has " +
                                     std::to_string(p.chunks.size()) + " chunks")
                                        .c_str());
            return p.chunks[id];
          },
          "id"_a)
      .def_static(
          "from_json", [](std::string_view text, std::string_view source) { return plan::parse_plan(text, source); },
          "text"_a, "source"_a = "<string>")
      .def_static(
          "from_dict",
          [](nb::handle dict, std::string_view source) {
            nb::str text = nb::str(nb::module_::import_("json").attr("dumps")(dict));
            return plan::parse_plan(text.c_str(), source);
          },
          "data"_a, "source"_a = "<dict>", "Reads a plan from the dict form of its JSON (as returned by to_dict()).")
      .def_static("load", &plan::load_plan, "path"_a)
      .def("to_json", &plan::plan_to_json, "indent"_a = 2)
      .def(
          "to_dict",
          [](const CommPlan& p) { return nb::module_::import_("json").attr("loads")(plan::plan_to_json(p, 2)); },
          "The plan's JSON form as Python dicts and lists; edit it and read it back with from_dict().")
      .def("save", &plan::save_plan, "path"_a)
      .def(nb::self == nb::self)
      .def("__repr__", &plan_repr)
      // Pickling (and copy.copy) go through the JSON form and its checked loader.
      .def("__getstate__", [](const CommPlan& p) { return plan::plan_to_json(p, -1); })
      .def("__setstate__",
           [](CommPlan& p, const std::string& state) { new (&p) CommPlan(plan::parse_plan(state, "<pickle>")); });

  m.def("parse_plan", &plan::parse_plan, "text"_a, "source"_a = "<string>",
        "Reads a plan from JSON text; raises PlanParseError naming the source and JSON path.");
  m.def("load_plan", &plan::load_plan, "path"_a);
  m.def("save_plan", &plan::save_plan, "plan"_a, "path"_a);
  m.def("plan_to_json", &plan::plan_to_json, "plan"_a, "indent"_a = 2);
}

void bind_templates(nb::module_& m) {
  m.def(
      "make_plan",
      [](std::string_view collective, int world_size, std::vector<std::int64_t> shape, std::string_view algorithm,
         int split, std::string_view dtype, int dim, std::string_view backend, std::string tensor, std::string output,
         std::string staging, std::optional<std::vector<int>> nodes, bool flat, std::string input) {
        plan::TemplateOptions options;
        options.collective = enum_arg<plan::Collective>(collective, "collective");
        options.algorithm = enum_arg<plan::Algorithm>(algorithm, "algorithm");
        options.world_size = world_size;
        options.split = split;
        options.shape = std::move(shape);
        options.dtype = enum_arg<plan::DType>(dtype, "dtype");
        options.dim = dim;
        options.backend = enum_arg<plan::Backend>(backend, "backend");
        options.tensor = std::move(tensor);
        options.output = std::move(output);
        options.staging = std::move(staging);
        if (nodes) options.nodes = std::move(*nodes);
        options.flat = flat;
        options.input = std::move(input);
        return plan::make_plan(options);
      },
      "collective"_a, nb::kw_only(), "world_size"_a, "shape"_a, "algorithm"_a = "ring", "split"_a = 1,
      "dtype"_a = "bf16", "dim"_a = 0, "backend"_a = "copy-engine", "tensor"_a = "x", "output"_a = "y",
      "staging"_a = "", "nodes"_a = nb::none(), "flat"_a = false, "input"_a = "",
      "Makes a template plan. `nodes` (one node id per rank) spanning several nodes makes a "
      "hierarchical plan (NCCL between nodes, rail-aligned; `algorithm` and `backend` inside each "
      "node; nodes of equal size) unless `flat` (then backend nccl). `shape` is the full (gathered / reduced) tensor; "
      "raises "
      "ShapeError when it cannot be split as asked. `staging` (reduce-scatter, direct only) "
      "names a staging tensor [world, ..., shape[dim] / world, ...]: each rank's partial is copied "
      "into its slot on the owner and the consumer adds the slots; `shape` then needs a unit dim 0. "
      "`input` (all-gather) names a one-shard input tensor: a local copy-engine chunk per piece "
      "puts each rank's shard in place, so a consumer waits for its own rows like any other's.");
}

void bind_verifier(nb::module_& m) {
  nb::class_<plan::Violation>(m, "Violation", "One broken rule: its group, rule, rank and chunk.")
      .def_prop_ro("group", [](const plan::Violation& v) { return std::string(plan::to_string(v.group)); })
      .def_ro("rule", &plan::Violation::rule)
      .def_ro("rank", &plan::Violation::rank)
      .def_ro("chunk", &plan::Violation::chunk)
      .def_ro("detail", &plan::Violation::detail)
      .def("format", &plan::Violation::format, "plan_name"_a = "<plan>")
      .def("__repr__", [](const plan::Violation& v) { return v.format("<plan>"); });

  nb::class_<plan::VerifyReport>(m, "VerifyReport", "Every violation the verifier found.")
      .def_ro("violations", &plan::VerifyReport::violations)
      .def_prop_ro("ok", &plan::VerifyReport::ok)
      .def("format", &plan::VerifyReport::format, "plan_name"_a = "<plan>")
      .def("__repr__", [](const plan::VerifyReport& r) {
        return "VerifyReport(ok=" + std::string(r.ok() ? "True" : "False") +
               ", violations=" + std::to_string(r.violations.size()) + ")";
      });

  m.def(
      "make_moe_dispatch_plan",
      [](int world_size, int local_experts, std::int64_t capacity, std::int64_t hidden, std::string_view dtype,
         std::string_view backend) {
        plan::MoeDispatchOptions o;
        o.world_size = world_size;
        o.local_experts = local_experts;
        o.capacity = capacity;
        o.hidden = hidden;
        o.dtype = enum_arg<plan::DType>(dtype, "dtype");
        o.backend = enum_arg<plan::Backend>(backend, "backend");
        return plan::make_moe_dispatch_plan(o);
      },
      nb::kw_only(), "world_size"_a, "local_experts"_a, "capacity"_a, "hidden"_a, "dtype"_a = "bf16",
      "backend"_a = "copy-engine",
      "The MoE dispatch plan (plan/expert_parallel.hpp): counts all-to-all, then rows chunks per (source, "
      "destination, local expert) of capacity rows whose count is read on the device from recv_counts.");
  m.def(
      "make_zigzag_gather_plan",
      [](int world_size, std::vector<std::int64_t> shape, std::string_view dtype, std::string_view backend,
         std::string tensor, std::string output) {
        plan::ZigzagGatherOptions o;
        o.world_size = world_size;
        o.shape = std::move(shape);
        o.dtype = enum_arg<plan::DType>(dtype, "dtype");
        o.backend = enum_arg<plan::Backend>(backend, "backend");
        o.tensor = std::move(tensor);
        o.output = std::move(output);
        return plan::make_zigzag_gather_plan(o);
      },
      nb::kw_only(), "world_size"_a, "shape"_a, "dtype"_a = "bf16", "backend"_a = "copy-engine", "tensor"_a = "kv",
      "output"_a = "kv_all",
      "The zig-zag gather (plan/sequence_parallel.hpp): rank r's [Z, H, S_loc, D] piece is global half-pieces r "
      "and 2W - 1 - r (S_loc / 2 positions each); the plan gathers every rank's halves, around the ring, into "
      "`output` [Z, H, W * S_loc, D] at their global positions.");
  m.def("moe_rows_chunk", &plan::moe_rows_chunk, "world_size"_a, "local_experts"_a, "src"_a, "dst"_a, "expert"_a,
        "Id of the rows chunk src -> dst for local expert `expert` of dst in make_moe_dispatch_plan's plan.");
  m.def("verify", &plan::verify, "plan"_a,
        "Checks a plan (well-formed, coverage, ordering, deadlock); never raises on a bad plan.");
  m.def("verify_or_raise", &plan::verify_or_throw, "plan"_a, "plan_name"_a = "<plan>",
        "Raises PlanVerifyError listing every violation when the plan is not safe.");
}

void bind_import(nb::module_& m) {
  nb::class_<plan::ImportedPlan>(m, "ImportedPlan",
                                 "A verified plan mapped from another tool's format, with the source element of "
                                 "each chunk (`origins`, by chunk id) and the source steps kept only as ordering "
                                 "points (`notes`).")
      .def_ro("plan", &plan::ImportedPlan::plan)
      .def_ro("origins", &plan::ImportedPlan::origins)
      .def_ro("notes", &plan::ImportedPlan::notes)
      .def("__repr__", [](const plan::ImportedPlan& p) { return "ImportedPlan(" + plan_repr(p.plan) + ")"; });
  m.def(
      "import_plan",
      [](std::optional<std::filesystem::path> path, std::string_view format, std::optional<std::string> text,
         std::string source, std::optional<std::vector<std::int64_t>> shape, std::string tensor, std::string output,
         std::string scratch, int dim, std::optional<std::string> dtype, std::string_view backend) {
        if (path.has_value() == text.has_value())
          throw UserError("import_plan: give either a path or text=, not both or neither");
        plan::ImportOptions o;
        o.source = std::move(source);
        if (shape) o.shape = std::move(*shape);
        o.tensor = std::move(tensor);
        o.output = std::move(output);
        o.scratch = std::move(scratch);
        o.dim = dim;
        if (dtype) o.dtype = enum_arg<plan::DType>(*dtype, "dtype");
        o.backend = enum_arg<plan::Backend>(backend, "backend");
        const auto f = enum_arg<plan::ImportFormat>(format, "format");
        nb::gil_scoped_release release;
        return path ? plan::import_plan_file(*path, f, o) : plan::import_plan(*text, f, o);
      },
      "path"_a = nb::none(), nb::kw_only(), "format"_a, "text"_a = nb::none(), "source"_a = "<string>",
      "shape"_a = nb::none(), "tensor"_a = "x", "output"_a = "y", "scratch"_a = "scratch", "dim"_a = 0,
      "dtype"_a = nb::none(), "backend"_a = "copy-engine",
      "Maps a plan from `format` (\"msccl-xml\", \"mscclpp-json\" or \"sendrecv\"), read from `path` or "
      "given as `text`, onto a verified plan. MSCCL and MSCCL++ count in chunks of the op's tensor: give its full "
      "`shape` (and `dim`, `tensor`, `dtype`, default bf16); a send/recv list names its tensors itself. Raises "
      "PlanParseError "
      "naming the element for what the IR cannot express, PlanVerifyError (each violation naming its chunk's "
      "source element) for a plan that is not safe. docs/IMPORT.md describes the mapping.");
  m.def("export_msccl_xml", &plan::export_msccl_xml, "plan"_a, "name"_a = "syncopate",
        "The plan as MSCCL algorithm XML (copy-engine or sm-copy all-gather, reduce-scatter, all-reduce or "
        "all-to-all); import_plan(format=\"msccl-xml\") reads it back to the same plan.");
}

}  // namespace

void bind_plan(nb::module_& m) {
  bind_values(m);
  bind_comm_plan(m);
  bind_templates(m);
  bind_verifier(m);
  bind_import(m);
}

}  // namespace syncopate::python
