// Rules for chunks whose rows are known only at run time (Chunk::runtime_rows, expert
// parallelism). The chunk's box is its capacity; each call it moves the first n rows along
// `dim`, n read on its dst from element `index` of the int32 tensor `counts`.
//
// Why capacity boxes suffice for "any counts up to capacity": coverage proves that every
// capacity box lands exactly once where the collective promises; a call moves a prefix of each
// box, and a consumer reads exactly the prefix named by the count it finds on its rank. These
// rules prove that this count is the sender's and this call's: exactly one chunk writes the
// element on dst, it comes from the same src, and it happens before the rows chunk (so once
// the rows chunk has landed, the count has too). The chunk lands and signals whatever n is
// (0 included), so the dependency graph, hence deadlock freedom, does not depend on counts.
//
//  well-formed  runtime-rows-dim (dim outside the box) runtime-rows-counts (unknown tensor,
//               not int32, index outside it) runtime-rows-op (only copies carry run-time rows:
//               an add of a count-dependent prefix is not modelled)
//  coverage     count-not-delivered count-delivered-twice count-wrong-source
//  ordering     count-unordered counts-too-complex
#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

// Work bound of the happens-before search (edges visited): a hostile plan is refused by name.
constexpr long long kMaxVisits = 1LL << 26;

// The coordinates of flat element `index` of a row-major `shape`.
std::vector<std::int64_t> coordinates(const std::vector<std::int64_t>& shape, std::int64_t index) {
  std::vector<std::int64_t> at(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    at[d] = index % shape[d];
    index /= shape[d];
  }
  return at;
}

bool box_holds(const Box& box, const std::vector<std::int64_t>& at) {
  if (box.offset.size() != at.size() || box.extent.size() != at.size()) return false;
  for (std::size_t d = 0; d < at.size(); ++d)
    if (at[d] < box.offset[d] || at[d] >= box.offset[d] + box.extent[d]) return false;
  return true;
}

}  // namespace

void check_runtime_rows_form(const CommPlan& plan, ViolationSink& sink) {
  for (const Chunk& chunk : plan.chunks) {
    if (!chunk.runtime_rows) continue;
    const RuntimeRows& rows = *chunk.runtime_rows;
    const int rank = chunk.dst >= 0 && chunk.dst < plan.world_size ? chunk.dst : -1;
    if (rows.dim < 0 || rows.dim >= static_cast<int>(chunk.box.extent.size()))
      sink.add(
          RuleGroup::well_formed, "runtime-rows-dim", rank, chunk.id,
          fmt::format("runtime_rows.dim is {} but the chunk's box has {} dims", rows.dim, chunk.box.extent.size()));
    if (chunk.op != ChunkOp::copy)
      sink.add(RuleGroup::well_formed, "runtime-rows-op", rank, chunk.id,
               fmt::format("a {} chunk carries runtime_rows: only copies may move a run-time number of rows",
                           to_string(chunk.op)));
    auto it = plan.tensors.find(rows.counts);
    if (it == plan.tensors.end()) {
      sink.add(RuleGroup::well_formed, "runtime-rows-counts", rank, chunk.id,
               fmt::format("runtime_rows.counts names tensor '{}', which is not in tensors", rows.counts));
      continue;
    }
    const TensorSpec& spec = it->second;
    const bool shape_ok =
        !spec.shape.empty() && std::all_of(spec.shape.begin(), spec.shape.end(), [](std::int64_t e) { return e > 0; });
    if (spec.dtype != DType::i32)
      sink.add(RuleGroup::well_formed, "runtime-rows-counts", rank, chunk.id,
               fmt::format("runtime_rows.counts '{}' is {}: row counts are int32", rows.counts, to_string(spec.dtype)));
    if (shape_ok && (rows.index < 0 || rows.index >= spec.elements()))
      sink.add(RuleGroup::well_formed, "runtime-rows-counts", rank, chunk.id,
               fmt::format("runtime_rows.index is {} but '{}' {} has {} elements", rows.index, rows.counts, spec.shape,
                           spec.elements()));
  }
}

void check_runtime_rows_counts(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink) {
  // The chunks writing each (rank, counts tensor, element) read by some rows chunk.
  struct Reader {
    const Chunk* chunk;
    std::vector<std::int64_t> at;
    std::vector<int> writers;
  };
  std::vector<Reader> readers;
  for (const Chunk& chunk : plan.chunks)
    if (chunk.runtime_rows)
      readers.push_back(
          {&chunk, coordinates(plan.tensors.at(chunk.runtime_rows->counts).shape, chunk.runtime_rows->index), {}});
  if (readers.empty()) return;
  // Writers by (rank, tensor), so each reader looks only at the chunks landing in its counts.
  std::map<std::pair<int, std::string>, std::vector<int>> writers_of;
  for (const Reader& reader : readers) writers_of[{reader.chunk->dst, reader.chunk->runtime_rows->counts}];
  for (const Chunk& writer : plan.chunks) {
    auto it = writers_of.find({writer.dst, writer.dst_tensor});
    if (it != writers_of.end()) it->second.push_back(writer.id);
  }
  long long looks = 0;
  for (Reader& reader : readers) {
    const auto& candidates = writers_of.at({reader.chunk->dst, reader.chunk->runtime_rows->counts});
    looks += static_cast<long long>(candidates.size());
    if (looks > kMaxVisits) {
      sink.add(RuleGroup::ordering, "counts-too-complex", -1, -1,
               fmt::format("matching row counts to the chunks that deliver them took over {} steps; the plan is "
                           "refused rather than passed unproven",
                           kMaxVisits));
      return;
    }
    for (int w : candidates)
      if (box_holds(plan.chunks[static_cast<std::size_t>(w)].dst_box, reader.at)) reader.writers.push_back(w);
  }

  // Descendants of each writer, found once per writer by a forward search over the graph.
  const int n = facts.graph.size();
  std::vector<int> stamp(static_cast<std::size_t>(n), -1);
  int searched_from = -1;
  long long visits = 0;
  auto reaches = [&](int from, int to) {
    if (searched_from != from) {
      searched_from = from;
      std::vector<int> stack{from};
      stamp[static_cast<std::size_t>(from)] = from;
      while (!stack.empty()) {
        const int at = stack.back();
        stack.pop_back();
        for (int next : facts.graph.successors(at)) {
          ++visits;
          if (stamp[static_cast<std::size_t>(next)] == from) continue;
          stamp[static_cast<std::size_t>(next)] = from;
          stack.push_back(next);
        }
      }
    }
    return from != to && stamp[static_cast<std::size_t>(to)] == from;
  };
  std::stable_sort(readers.begin(), readers.end(), [](const Reader& a, const Reader& b) {
    const int wa = a.writers.empty() ? -1 : a.writers.front(), wb = b.writers.empty() ? -1 : b.writers.front();
    return wa < wb;  // one search per writer
  });
  for (const Reader& reader : readers) {
    const Chunk& c = *reader.chunk;
    const RuntimeRows& rows = *c.runtime_rows;
    const std::string element = fmt::format("{}{}", rows.counts, reader.at);
    if (reader.writers.empty()) {
      sink.add(RuleGroup::coverage, "count-not-delivered", c.dst, c.id,
               fmt::format("chunk {} ({}) reads its row count from {} on rank {}, but no chunk writes that element "
                           "there: the count must come from rank {} each call (a counts exchange before the rows)",
                           c.id, describe_route(c), element, c.dst, c.src));
      continue;
    }
    if (reader.writers.size() > 1) {
      sink.add(RuleGroup::coverage, "count-delivered-twice", c.dst, c.id,
               fmt::format("chunk {} ({}) reads its row count from {} on rank {}, which chunks {} all write: exactly "
                           "one chunk may deliver a count",
                           c.id, describe_route(c), element, c.dst, fmt::join(reader.writers, ", ")));
      continue;
    }
    const Chunk& w = plan.chunks[static_cast<std::size_t>(reader.writers.front())];
    if (w.src != c.src) {
      sink.add(RuleGroup::coverage, "count-wrong-source", c.dst, c.id,
               fmt::format("chunk {} ({}) reads its row count from {} on rank {}, but chunk {} ({}) delivers it: the "
                           "count of rows from rank {} must come from rank {}",
                           c.id, describe_route(c), element, c.dst, w.id, describe_route(w), c.src, c.src));
      continue;
    }
    if (visits > kMaxVisits) {
      sink.add(RuleGroup::ordering, "counts-too-complex", -1, -1,
               fmt::format("proving that each row count lands before its rows took over {} graph steps; the plan "
                           "is refused rather than passed unproven",
                           kMaxVisits));
      return;
    }
    if (!reaches(w.id, c.id))
      sink.add(RuleGroup::ordering, "count-unordered", c.dst, c.id,
               fmt::format("chunk {} ({}) reads its row count from {} on rank {}, delivered by chunk {}, which is not "
                           "ordered before it: add chunk {} to its deps (else a consumer may read last call's count)",
                           c.id, describe_route(c), element, c.dst, w.id, w.id));
  }
}

}  // namespace syncopate::plan::verify_detail
