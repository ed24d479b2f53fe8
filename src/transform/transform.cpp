// The transformer's pipeline: tokenize -> find the kernel and check its annotations -> rewrite.
#include "syncopate/transform/transform.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"

#include "analysis.hpp"
#include "source_model.hpp"

namespace syncopate::transform {

const std::vector<AddedParam>& added_params() {
  // The one list of added parameters: the rewrite, the `__syncopate__` dict of the output (which
  // the Python launcher reads) and the docs' table all follow it.
  static const std::vector<AddedParam> kParams{
      {"sy_signals", "int32*", "this rank's signal slots"},
      {"sy_tile_order", "int32*", "TileOrder: position -> linear tile id"},
      {"sy_tiles_n", "int", "tiles along N (1 for row-wise kernels)"},
      {"sy_wait_offsets", "int32*", "CSR offsets by tile id into sy_wait_slots"},
      {"sy_wait_slots", "int32*", "landing slots each tile waits on"},
      {"sy_notify_offsets", "int32*", "CSR offsets by tile id into sy_notify_slots"},
      {"sy_notify_slots", "int32*", "ready slots each tile increments"},
      {"sy_slot_writers", "int32*", "increments per call of each slot"},
      {"sy_epoch", "int32*", "the call's epoch word (device memory, advanced by each call)"},
      {"sy_wait_bound_ns", "int", "time bound of every wait, in ns"},
      {"sy_rank", "int", "this rank, recorded on timeout"},
      {"sy_error", "int64*", "[flag, rank, slot, expected, seen, tile, 0, 0], zeroed by the launcher"},
  };
  return kParams;
}

const std::vector<AddedParam>& block_params() {
  // Only kernels that wait inside a loop over blocks get these (docs/ANNOTATIONS.md).
  static const std::vector<AddedParam> kParams{
      {"sy_blocks", "int", "blocks per row of the block tables (the K/V blocks of one tile column)"},
      {"sy_block_wait_offsets", "int32*", "CSR offsets by key * sy_blocks + block into sy_block_wait_slots"},
      {"sy_block_wait_slots", "int32*", "landing slots each block waits on"},
      {"sy_block_first", "int32*", "by key: the block whose chunks land first (order=arrival starts there)"},
      {"sy_block_waits", "constexpr",
       "1 when some block of the tables has a slot to wait on; 0 compiles order=arrival loops as written"},
  };
  return kParams;
}

namespace detail {
std::vector<AddedParam> added_params_of(const KernelAnalysis& a) {
  std::vector<AddedParam> out = added_params();
  if (!a.block_waits.empty()) out.insert(out.end(), block_params().begin(), block_params().end());
  return out;
}
}  // namespace detail

std::vector<TransformResult> transform_kernels(std::string_view source, std::string_view filename,
                                               const std::vector<std::string>& kernel_names,
                                               const TransformOptions& options) {
  if (kernel_names.empty()) throw UserError(fmt::format("{}: no kernel named to transform", filename));
  for (std::size_t i = 0; i < kernel_names.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (kernel_names[i] == kernel_names[j])
        throw UserError(fmt::format("{}: kernel '{}' is named twice", filename, kernel_names[i]));
  const detail::Module module = detail::read_module(source, filename);
  std::vector<detail::KernelAnalysis> analyses;
  for (const auto& name : kernel_names) analyses.push_back(detail::analyze(module, name, options));
  const std::string text = detail::rewrite(module, analyses, options);
  std::vector<TransformResult> results;
  for (const auto& analysis : analyses) {
    TransformResult r;
    r.source = text;
    r.kernel_name = analysis.kernel.name;
    for (const auto& p : analysis.kernel.params) r.kernel_params.push_back(p.name);
    r.added_params = detail::added_params_of(analysis);
    r.accesses = analysis.accesses;
    r.tile_blocks = static_cast<int>(analysis.tiles.size());
    results.push_back(std::move(r));
  }
  return results;
}

TransformResult transform_kernel(std::string_view source, std::string_view filename, std::string_view kernel_name,
                                 const TransformOptions& options) {
  return std::move(transform_kernels(source, filename, {std::string(kernel_name)}, options).front());
}

std::string describe_json(const TransformResult& result, int indent) {
  nlohmann::ordered_json j;
  j["version"] = kOutputVersion;
  j["kernel"] = result.kernel_name;
  j["kernel_params"] = result.kernel_params;
  auto& added = j["added_params"] = nlohmann::ordered_json::array();
  for (const auto& p : result.added_params)
    added.push_back({{"name", p.name}, {"type", p.type}, {"meaning", p.meaning}});
  auto& acc = j["accesses"] = nlohmann::ordered_json::array();
  for (const auto& a : result.accesses) {
    nlohmann::ordered_json entry = {{"tensor", a.access.tensor},
                                    {"param", a.param},
                                    {"role", a.access.role == lower::AccessRole::consume ? "consume" : "produce"},
                                    {"m_dim", a.access.m_dim},
                                    {"n_dim", a.access.n_dim}};
    if (a.access.m_local_shard) entry["m_local_shard"] = true;  // absent = false
    if (a.per_block) entry["per_block"] = true;                 // absent = false
    if (a.arrival_order) entry["order"] = "arrival";            // absent = source order
    entry["line"] = a.line;
    acc.push_back(std::move(entry));
  }
  j["tile_blocks"] = result.tile_blocks;
  return j.dump(indent) + "\n";
}

}  // namespace syncopate::transform
