// make_heap_layout(): see heap_layout.hpp.
#include "syncopate/runtime/heap_layout.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/runtime/box_copy.hpp"

namespace syncopate::runtime {
namespace {

std::int64_t align_up(std::int64_t v) { return (v + kHeapAlign - 1) / kHeapAlign * kHeapAlign; }

const plan::TensorSpec& tensor_of(const plan::CommPlan& plan, const std::string& name, int chunk) {
  const auto it = plan.tensors.find(name);
  if (it == plan.tensors.end())
    throw UserError(fmt::format("chunks[{}]: unknown-tensor: \"{}\" is not in the plan", chunk, name));
  return it->second;
}

}  // namespace

std::int64_t HeapLayout::tensor_offset(const std::string& name) const {
  const auto it = tensor_offsets.find(name);
  if (it != tensor_offsets.end()) return it->second;
  std::string known;
  for (const auto& [n, off] : tensor_offsets) known += (known.empty() ? "" : ", ") + n;
  throw UserError(fmt::format("heap layout: unknown-tensor: \"{}\" (the plan has: {})", name, known));
}

bool needs_staging(const plan::CommPlan& plan, const plan::Chunk& c) {
  if (c.op == plan::ChunkOp::reduce_add && c.backend != plan::Backend::sm_copy) return true;
  if (c.backend != plan::Backend::nccl || c.src == c.dst) return false;
  const auto& src = tensor_of(plan, c.tensor, c.id);
  const auto& dst = tensor_of(plan, c.dst_tensor, c.id);
  const auto copies = box_copies(c.box, src.shape, c.dst_box, dst.shape, plan::dtype_size(src.dtype));
  return !src_contiguous(copies) || !dst_contiguous(copies);
}

HeapLayout make_heap_layout(const plan::CommPlan& plan, const std::vector<lower::SignalTable>& tables) {
  if (static_cast<int>(tables.size()) != plan.world_size)
    throw UserError(fmt::format("heap layout: table-count-mismatch: {} signal tables for world_size {}", tables.size(),
                                plan.world_size));
  HeapLayout layout;
  std::int64_t at = 0;
  layout.control_offset = at;
  at = align_up(at + kControlSlots * 4);
  for (const auto& t : tables)
    layout.num_signal_slots = std::max(layout.num_signal_slots, static_cast<int>(t.slots.size()));
  layout.signals_offset = at;
  at = align_up(at + std::int64_t{layout.num_signal_slots} * 4);
  for (const auto& [name, spec] : plan.tensors) {
    layout.tensor_offsets[name] = at;
    at = align_up(at + spec.elements() * plan::dtype_size(spec.dtype));
  }
  layout.staging_offset_of_chunk.assign(plan.chunks.size(), -1);
  for (const auto& c : plan.chunks) {
    if (!needs_staging(plan, c)) continue;
    const auto& src = tensor_of(plan, c.tensor, c.id);
    layout.staging_offset_of_chunk[c.id] = at;
    at = align_up(at + c.box.elements() * plan::dtype_size(src.dtype));
  }
  layout.total_bytes = std::max<std::int64_t>(at, kHeapAlign);
  return layout;
}

}  // namespace syncopate::runtime
