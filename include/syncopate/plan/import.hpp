// Plans ported from other tools: MSCCL algorithm XML, MSCCL++ execution plans (JSON) and plain
// send/recv lists (Syncopate's own JSON format, docs/IMPORT.md), mapped onto the plan IR and
// verified; and the way back to MSCCL XML (export_msccl_xml), so every template round-trips.
//
// What the three have in common (docs/IMPORT.md has the details per format):
//  - buffers become plan tensors: the collective's tensor (and the all-to-all output), whose
//    boxes are the format's chunks along `dim`; scratch buffers become one more tensor;
//  - each thread block (MSCCL, MSCCL++) or stream (send/recv) becomes a stream of the rank that
//    issues its chunks: copies are issued by their source (pushed), reduce-adds by their
//    destination (pulled), as the templates do; thread blocks that the source already runs one
//    after the other (the first step of one depends on the last of the other) share a stream;
//  - every ordering the source states (step order, depid/deps, signal/wait, barriers) becomes
//    stream order or a dep; a receive lands its chunk, so what follows it waits for that;
//  - reductions become reduce-add chunks (an in-flight sum that is never stored, MSCCL's `rrs`,
//    is kept in its source box: the IR only moves boxes of tensors);
//  - anything the IR cannot express is refused with PlanParseError naming the file, the
//    element (`algo/gpu[1]/tb[0]/step[3]`, `gpus[0].threadblocks[2].ops[5]`) and why; nothing
//    is dropped silently (a step that maps onto nothing, like a copy of a buffer onto itself,
//    is kept as an ordering point and listed in ImportedPlan::notes).
// The imported plan is then verified; a source plan that is itself wrong (a missing chunk, a
// race, a cycle) fails with PlanVerifyError whose every violation names the source element of
// its chunk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/enums.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {

enum class ImportFormat : std::uint8_t { msccl_xml, mscclpp_json, sendrecv };

template <>
struct EnumTable<ImportFormat> {
  static constexpr std::string_view kind = "import format";
  static constexpr std::array<std::pair<ImportFormat, std::string_view>, 3> entries{
      {{ImportFormat::msccl_xml, "msccl-xml"},
       {ImportFormat::mscclpp_json, "mscclpp-json"},
       {ImportFormat::sendrecv, "sendrecv"}}};
};

// How a chunk-based format (MSCCL, MSCCL++) lands on the op's tensor. The send/recv format
// names its tensors itself and refuses these (they must stay at their defaults).
struct ImportOptions {
  std::string source = "<string>";         // names the input in messages
  std::string tensor = "x";                // the collective's tensor
  std::string output = "y";                // all-to-all: the output tensor
  std::string scratch = "scratch";         // the scratch buffer's tensor (made only when used)
  std::vector<std::int64_t> shape;         // of the full tensor; required for MSCCL and MSCCL++
  int dim = 0;                             // the format's chunks cut this dimension
  std::optional<DType> dtype;              // of the tensors (MSCCL, MSCCL++: bf16 when not given)
  Backend backend = Backend::copy_engine;  // copy-engine or sm-copy (one side issues each chunk)
};

struct ImportedPlan {
  CommPlan plan;
  std::vector<std::string> origins;  // by chunk id: the source element(s) the chunk came from
  std::vector<std::string> notes;    // source steps kept only as ordering points, and why
};

// Parses, maps and verifies. Throws PlanParseError (bad or inexpressible input, naming the
// element), ShapeError (options that do not fit the source) or PlanVerifyError (the mapped plan
// breaks a verifier rule; each violation names its chunk's source element).
ImportedPlan import_plan(std::string_view text, ImportFormat format, const ImportOptions& options);
// Reads `path` (refusing directories, devices and files over 1 GiB) with options.source = path.
ImportedPlan import_plan_file(const std::filesystem::path& path, ImportFormat format, ImportOptions options);

// The report with each violation followed by the source element of its chunk (and of every
// chunk its detail names, e.g. along a cycle); a violation about a region with no chunk of its
// own (a missing delivery) lists the chunks that land on or read that region on its rank.
std::string format_report_with_origins(const VerifyReport& report, const ImportedPlan& imported,
                                       std::string_view plan_name);

// MSCCL algorithm XML of a verified copy-engine or sm-copy plan of all-gather, reduce-scatter,
// all-reduce or all-to-all whose boxes fall on one even grid of chunks along the collective's
// dim. Each (rank, stream) becomes thread blocks, one per peer and direction, whose steps keep
// the stream's order (through depid/deps where it moves between thread blocks); the peer's side
// of each chunk goes to a thread block of its own per connection. Throws UserError naming the
// chunk for what MSCCL cannot express (an NCCL chunk, a staged plan, a dep on a chunk that
// lands on neither end, a box off the grid).
std::string export_msccl_xml(const CommPlan& plan, std::string_view name = "syncopate");

}  // namespace syncopate::plan
