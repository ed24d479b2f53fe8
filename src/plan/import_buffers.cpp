// ChunkBuffers (import_buffers.hpp): MSCCL / MSCCL++ buffer references -> boxes of plan tensors.
#include "import_buffers.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"

namespace syncopate::plan::import_detail {

Collective chunk_collective(std::string_view name, std::string_view source, std::string_view element) {
  if (name == "allgather") return Collective::all_gather;
  if (name == "reducescatter" || name == "reduce_scatter") return Collective::reduce_scatter;
  if (name == "allreduce") return Collective::all_reduce;
  if (name == "alltoall") return Collective::all_to_all;
  refuse(source, element,
         fmt::format("collective \"{}\" has no counterpart in the plan IR (allgather, reducescatter, allreduce, "
                     "alltoall map onto all-gather, reduce-scatter, all-reduce, all-to-all)",
                     name));
}

ChunkBuffers::ChunkBuffers(Collective kind, int world, std::int64_t chunks_per_loop, const ImportOptions& options,
                           std::string_view element)
    : kind_(kind), world_(world), n_(chunks_per_loop), o_(options) {
  const auto& shape = options.shape;
  if (shape.empty())
    throw ShapeError(
        fmt::format("{}: the op's tensor shape is needed to map {} chunks onto boxes (--shape)", options.source, n_));
  for (auto s : shape)
    if (s < 1) throw ShapeError(fmt::format("{}: shape {} has a size below 1", options.source, fmt::join(shape, "x")));
  if (options.dim < 0 || options.dim >= static_cast<int>(shape.size()))
    throw ShapeError(
        fmt::format("{}: dim {} is out of range for shape {}", options.source, options.dim, fmt::join(shape, "x")));
  if (options.tensor.empty() || options.tensor == options.scratch ||
      (kind == Collective::all_to_all &&
       (options.output.empty() || options.output == options.tensor || options.output == options.scratch)))
    throw ShapeError(
        fmt::format("{}: the tensor, output and scratch names must be distinct and not empty (got "
                    "\"{}\", \"{}\", \"{}\")",
                    options.source, options.tensor, options.output, options.scratch));
  if (world < 1) refuse(options.source, element, fmt::format("{} GPUs: a plan needs at least one", world));
  if (n_ < 1) refuse(options.source, element, fmt::format("{} chunks per loop: the buffers need at least one", n_));
  const bool per_rank = kind != Collective::all_reduce;
  if (per_rank && n_ % world != 0)
    refuse(options.source, element,
           fmt::format("{} chunks per loop do not divide among {} GPUs: each rank's part of a {} must be whole "
                       "chunks",
                       n_, world, to_string(kind)));
  const std::int64_t size = shape[options.dim];
  if (size % n_ != 0)
    throw ShapeError(
        fmt::format("{}: dim {} of shape {} has {} elements, not a multiple of the {} chunks per loop "
                    "(the format's chunks are equal)",
                    options.source, options.dim, fmt::join(shape, "x"), size, n_));
  unit_ = size / n_;
  input_.assign(world, 0);
  output_.assign(world, 0);
  scratch_.assign(world, 0);
}

std::int64_t ChunkBuffers::capacity(char buffer) const {
  const std::int64_t per_rank = n_ / world_;
  switch (kind_) {
    case Collective::all_gather:
      return buffer == 'i' ? per_rank : n_;
    case Collective::reduce_scatter:
      return buffer == 'o' ? per_rank : n_;
    default:
      return n_;
  }
}

void ChunkBuffers::declare(int rank, std::int64_t input, std::int64_t output, std::int64_t scratch,
                           std::string_view element) {
  const std::pair<char, std::int64_t> counts[] = {{'i', input}, {'o', output}};
  for (const auto& [buffer, count] : counts)
    if (count < 0 || count > capacity(buffer))
      refuse(o_.source, element,
             fmt::format("{} {} chunks: a {} of {} chunks per loop over {} GPUs has {} in its {} buffer",
                         buffer == 'i' ? "input" : "output", count, to_string(kind_), n_, world_, capacity(buffer),
                         buffer == 'i' ? "input" : "output"));
  if (scratch < 0) refuse(o_.source, element, fmt::format("scratch of {} chunks", scratch));
  input_[rank] = input;
  output_[rank] = output;
  scratch_[rank] = scratch;
}

Place ChunkBuffers::place(int rank, char buffer, std::int64_t index, std::int64_t count,
                          std::string_view element) const {
  const std::int64_t declared = buffer == 'i' ? input_[rank] : buffer == 'o' ? output_[rank] : scratch_[rank];
  const char* name = buffer == 'i' ? "input" : buffer == 'o' ? "output" : "scratch";
  if (count < 1) refuse(o_.source, element, fmt::format("count {}: a transfer moves at least one chunk", count));
  if (index < 0 || index > declared - count)
    refuse(o_.source, element,
           fmt::format("chunks {}..{} of the {} buffer: GPU {} declares {} {} chunks", index, index + count - 1, name,
                       rank, declared, name));
  std::int64_t first = index;  // in chunks of the tensor
  std::string tensor = o_.tensor;
  const std::int64_t per_rank = n_ / world_;
  if (buffer == 's') {
    tensor = o_.scratch;
  } else if (kind_ == Collective::all_gather && buffer == 'i') {
    first = rank * per_rank + index;
  } else if (kind_ == Collective::reduce_scatter && buffer == 'o') {
    first = rank * per_rank + index;
  } else if (kind_ == Collective::all_to_all && buffer == 'o') {
    tensor = o_.output;
  }
  Box box{std::vector<std::int64_t>(o_.shape.size(), 0), o_.shape};
  box.offset[o_.dim] = first * unit_;
  box.extent[o_.dim] = count * unit_;
  return {std::move(tensor), std::move(box)};
}

CommPlan ChunkBuffers::header() const {
  CommPlan plan;
  plan.world_size = world_;
  plan.collective.kind = kind_;
  plan.collective.tensor = o_.tensor;
  plan.collective.dim = o_.dim;
  plan.collective.split = 1;
  const TensorSpec spec{o_.shape, o_.dtype.value_or(DType::bf16), "row-major"};
  plan.tensors[o_.tensor] = spec;
  if (kind_ == Collective::all_to_all) {
    plan.collective.output = o_.output;
    plan.tensors[o_.output] = spec;
  }
  const std::int64_t scratch = *std::max_element(scratch_.begin(), scratch_.end());
  if (scratch > 0) {
    TensorSpec s = spec;
    s.shape[o_.dim] = scratch * unit_;
    plan.tensors[o_.scratch] = s;
  }
  return plan;
}

}  // namespace syncopate::plan::import_detail
