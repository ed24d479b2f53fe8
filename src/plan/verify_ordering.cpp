// Rule group "ordering": no races on any rank's memory.
//
// A chunk reads its source box on its src rank and writes its destination box on its dst rank.
// Two accesses to overlapping regions of one tensor on one rank must be ordered in the
// dependency graph (a path one way or the other) unless both are reads, or both are reduce-adds
// (addition commutes; the runtime stages concurrent reduce-adds). Only accesses to the same
// (rank, tensor) are compared, with a sweep along the dimension where their boxes differ most,
// so a real plan costs about n log n here, not n^2.
#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::ordering;
// Overlapping pairs kept for the reachability test; only hostile plans get near it.
constexpr std::size_t kMaxPairs = std::size_t{1} << 20;
// Box comparisons in the sweeps, for the same reason.
constexpr std::size_t kMaxComparisons = std::size_t{1} << 25;

struct Access {
  int chunk;
  bool write;
  bool reduce;
  const Box* box;
};

struct Candidate {
  int first;   // the reader for a read/write pair, else the smaller id
  int second;  // the writer for a read/write pair, else the larger id
  bool write_write;
  int rank;
  const std::string* tensor;
};

// The dimension along which the boxes have the most distinct offsets: sweeping along it
// separates the most pairs.
std::size_t sweep_dim(const std::vector<Access>& accesses) {
  const std::size_t dims = accesses.front().box->offset.size();
  std::size_t best = 0, best_distinct = 0;
  std::vector<std::int64_t> offsets;
  for (std::size_t d = 0; d < dims; ++d) {
    offsets.clear();
    for (const auto& a : accesses) offsets.push_back(a.box->offset[d]);
    std::sort(offsets.begin(), offsets.end());
    const auto distinct = static_cast<std::size_t>(std::unique(offsets.begin(), offsets.end()) - offsets.begin());
    if (distinct > best_distinct) {
      best = d;
      best_distinct = distinct;
    }
  }
  return best;
}

class OrderingChecker {
 public:
  OrderingChecker(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink)
      : plan_(plan), facts_(facts), sink_(sink) {}

  void run() {
    std::map<std::pair<int, std::string_view>, std::vector<Access>> groups;
    for (const auto& c : plan_.chunks) {
      groups[{c.src, c.tensor}].push_back({c.id, false, false, &c.box});
      const bool reduce = c.op == ChunkOp::reduce_add;
      groups[{c.dst, c.dst_tensor}].push_back({c.id, true, reduce, &c.dst_box});
    }
    for (auto& [key, accesses] : groups) {
      const auto& tensor = plan_.tensors.find(std::string(key.second))->first;
      collect(key.first, tensor, accesses);
      if (truncated_) break;
    }
    if (truncated_) {
      sink_.add(kGroup, "ordering-too-complex", -1, -1,
                fmt::format("so many chunks touch overlapping regions (more than {} pairs, or "
                            "{} box comparisons) that only the first were checked for races",
                            kMaxPairs, kMaxComparisons));
    }
    // No duplicates to remove: a (reader, writer) pair can only meet in the group of the
    // reader's src rank and tensor, and a pair of writers only in their common destination's.
    std::vector<std::pair<int, int>> pairs;
    pairs.reserve(candidates_.size());
    for (const auto& c : candidates_) pairs.push_back({c.first, c.second});
    const auto ordered = ordered_pairs(facts_, pairs);
    for (std::size_t i = 0; i < candidates_.size(); ++i)
      if (!ordered[i]) report(candidates_[i]);
  }

 private:
  void collect(int rank, const std::string& tensor, std::vector<Access>& accesses) {
    const std::size_t d = sweep_dim(accesses);
    std::sort(accesses.begin(), accesses.end(),
              [d](const Access& x, const Access& y) { return x.box->offset[d] < y.box->offset[d]; });
    std::vector<const Access*> active;
    for (const auto& a : accesses) {
      const auto begin = a.box->offset[d];
      std::erase_if(active, [&](const Access* b) { return b->box->offset[d] + b->box->extent[d] <= begin; });
      comparisons_ += active.size();
      if (comparisons_ > kMaxComparisons) {
        truncated_ = true;
        return;
      }
      for (const Access* b : active) consider(rank, tensor, a, *b);
      if (truncated_) return;
      active.push_back(&a);
    }
  }

  void consider(int rank, const std::string& tensor, const Access& a, const Access& b) {
    if (a.chunk == b.chunk) return;  // a chunk reading and writing one rank is one operation
    if (!a.write && !b.write) return;
    if (a.write && b.write && a.reduce && b.reduce) return;
    if (!a.box->overlaps(*b.box)) return;
    if (candidates_.size() >= kMaxPairs) {
      truncated_ = true;
      return;
    }
    if (a.write && b.write) {
      candidates_.push_back({std::min(a.chunk, b.chunk), std::max(a.chunk, b.chunk), true, rank, &tensor});
    } else {
      const Access& reader = a.write ? b : a;
      const Access& writer = a.write ? a : b;
      candidates_.push_back({reader.chunk, writer.chunk, false, rank, &tensor});
    }
  }

  void report(const Candidate& c) {
    const Chunk& first = plan_.chunks[static_cast<std::size_t>(c.first)];
    const Chunk& second = plan_.chunks[static_cast<std::size_t>(c.second)];
    if (!c.write_write) {
      sink_.add_lazy(kGroup, "forward-race", c.rank, first.id, [&] {
        const Box region = intersect(first.box, second.dst_box);
        return fmt::format(
            "chunk {} ({}) sends {} from rank {}, but chunk {} ({}), which writes that region "
            "there, is not ordered with it (add {} to chunk {}'s deps to send what chunk {} "
            "writes, or {} to chunk {}'s deps to send what was there before it)",
            first.id, describe_route(first), describe_box(*c.tensor, region), c.rank, second.id, describe_route(second),
            second.id, first.id, second.id, first.id, second.id);
      });
      return;
    }
    sink_.add_lazy(kGroup, "write-race", c.rank, second.id, [&] {
      const Box region = intersect(first.dst_box, second.dst_box);
      return fmt::format(
          "chunks {} ({}, {}) and {} ({}, {}) both write {} on rank {} and neither is ordered "
          "before the other (only two reduce-adds may overlap unordered)",
          first.id, to_string(first.op), describe_route(first), second.id, to_string(second.op), describe_route(second),
          describe_box(*c.tensor, region), c.rank);
    });
  }

  const CommPlan& plan_;
  const GraphFacts& facts_;
  ViolationSink& sink_;
  std::vector<Candidate> candidates_;
  std::size_t comparisons_ = 0;
  bool truncated_ = false;
};

}  // namespace

void check_ordering(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink) {
  OrderingChecker(plan, facts, sink).run();
}

}  // namespace syncopate::plan::verify_detail
