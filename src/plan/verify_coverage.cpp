// Rule group "coverage": replays the plan symbolically and checks the collective's promise.
//
// Every rank holds every tensor, cut into the cells of verify_grid.hpp. A cell holds a
// symbolic value (verify_values.hpp). Chunks run in dependency order (the value a chunk sends
// is what happened before it); a copy overwrites the destination cells, a reduce-add adds into
// them. At the end each promised cell must hold exactly the promised value and have been
// delivered once. Regions with the same problem are merged into one violation (bounding box).
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verify_grid.hpp"
#include "verify_internal.hpp"
#include "verify_values.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::coverage;
// Cells over all ranks and tensors; 4 ints each, so this bounds the replay to ~64 MiB.
constexpr std::int64_t kMaxCells = std::int64_t{1} << 22;
// Cell reads and writes of the whole replay: many chunks each covering many cells (a hostile
// plan) would otherwise take minutes.
constexpr std::int64_t kMaxCellVisits = std::int64_t{1} << 26;

// How many cells the replay touches: each chunk reads and writes the cells of its box.
std::int64_t replay_visits(const CommPlan& plan, const PlanGrid& grid) {
  std::int64_t visits = 0;
  for (const auto& chunk : plan.chunks) {
    const auto t = static_cast<std::size_t>(grid.tensor_index.find(chunk.tensor)->second);
    const TensorGrid& g = grid.tensors[t];
    std::int64_t cells = 1;
    for (std::size_t d = 0; d < chunk.box.offset.size(); ++d) {
      const auto begin = chunk.box.offset[d];
      cells *= g.cut_index(d, begin + chunk.box.extent[d]) - g.cut_index(d, begin);
    }
    visits += 2 * cells;  // cells <= cells of the tensor, so neither product overflows
    if (visits > kMaxCellVisits) return visits;
  }
  return visits;
}

struct RankTensorState {
  std::vector<int> value;
  std::vector<int> deliveries;  // copies into the cell
  std::vector<int> first_writer;
  std::vector<int> last_writer;
};

// One reported problem, accumulated over the cells that share it.
struct Finding {
  Box bounds;  // bounding box of the cells
  int chunk = -1;
  int first_writer = -1;
  int deliveries = 0;
};

// rank, tensor, shard/block, kind, value: cells agreeing on all of these merge.
using FindingKey = std::tuple<int, int, int, int, int>;
enum FindingKind : int { kWrongValue = 0, kDeliveredTwice = 1 };

void grow(Box& bounds, const Box& cell) {
  if (bounds.offset.empty()) {
    bounds = cell;
    return;
  }
  for (std::size_t d = 0; d < bounds.offset.size(); ++d) {
    const auto end = std::max(bounds.offset[d] + bounds.extent[d], cell.offset[d] + cell.extent[d]);
    bounds.offset[d] = std::min(bounds.offset[d], cell.offset[d]);
    bounds.extent[d] = end - bounds.offset[d];
  }
}

class CoverageReplay {
 public:
  CoverageReplay(const CommPlan& plan, const GraphFacts& facts, PlanGrid grid, ViolationSink& sink)
      : plan_(plan),
        facts_(facts),
        grid_(std::move(grid)),
        sink_(sink),
        coll_(plan.collective),
        world_(plan.world_size) {}

  void run() {
    coll_tensor_ = grid_.tensor_index.at(coll_.tensor);
    staged_ = coll_.staged();
    if (coll_.kind == Collective::all_to_all || staged_) output_tensor_ = grid_.tensor_index.at(coll_.output);
    if (coll_.gathers_from_input()) input_tensor_ = grid_.tensor_index.at(coll_.input);
    dims_ = static_cast<int>(plan_.tensors.at(coll_.tensor).shape.size());
    shard_size_ = plan_.tensors.at(coll_.tensor).shape[static_cast<std::size_t>(coll_.dim)];
    initialise();
    for (int id : facts_.replay_order) replay(plan_.chunks[static_cast<std::size_t>(id)]);
    check_promise();
  }

 private:
  RankTensorState& state(int rank, int tensor) {
    return states_[static_cast<std::size_t>(rank) * grid_.tensors.size() + static_cast<std::size_t>(tensor)];
  }
  // Which shard (block) of the collective dim a cell lies in; cells never straddle shards.
  int shard_of(const Box& cell) const {
    const auto begin = cell.offset[static_cast<std::size_t>(coll_.dim)];
    int lo = 0, hi = world_ - 1;
    while (lo < hi) {  // last shard whose begin <= coordinate
      const int mid = (lo + hi + 1) / 2;
      if (even_split(shard_size_, world_, mid).begin <= begin)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
  Box shard_box(int tensor, int shard) const {
    const auto& shape = plan_.tensors.at(grid_.names[static_cast<std::size_t>(tensor)]).shape;
    Box box{std::vector<std::int64_t>(shape.size(), 0), shape};
    const Span span = even_split(shard_size_, world_, shard);
    box.offset[static_cast<std::size_t>(coll_.dim)] = span.begin;
    box.extent[static_cast<std::size_t>(coll_.dim)] = span.size;
    return box;
  }

  void initialise() {
    states_.resize(static_cast<std::size_t>(world_) * grid_.tensors.size());
    for (int r = 0; r < world_; ++r) {
      for (std::size_t t = 0; t < grid_.tensors.size(); ++t) {
        const auto cells = static_cast<std::size_t>(grid_.tensors[t].cells);
        auto& s = state(r, static_cast<int>(t));
        s.value.assign(cells, ValueTable::kUndefined);
        s.deliveries.assign(cells, 0);
        s.first_writer.assign(cells, -1);
        s.last_writer.assign(cells, -1);
      }
      // What each rank starts with: its own shard (all-gather), its partial (reductions), its
      // input (all-to-all). Every other tensor and region starts undefined.
      auto& input = state(r, coll_tensor_);
      const int own = values_.origin(coll_tensor_, dims_, r);
      if (input_tensor_ >= 0) {
        // The own shard starts in the input, at offset 0 along dim: the value a local chunk
        // moves into shard r of the gathered tensor.
        std::vector<std::int64_t> delta(static_cast<std::size_t>(dims_), 0);
        delta[static_cast<std::size_t>(coll_.dim)] = -even_split(shard_size_, world_, r).begin;
        auto& in = state(r, input_tensor_);
        std::fill(in.value.begin(), in.value.end(), values_.shifted(own, delta));
      } else if (coll_.kind == Collective::all_gather) {
        for (auto cell : grid_.tensors[coll_tensor_].cells_of(shard_box(coll_tensor_, r)))
          input.value[static_cast<std::size_t>(cell)] = own;
      } else {
        std::fill(input.value.begin(), input.value.end(), own);
      }
    }
  }

  void replay(const Chunk& chunk) {
    const int from = grid_.tensor_index.at(chunk.tensor);
    const int to = grid_.tensor_index.at(chunk.dst_tensor);
    const auto src_cells = grid_.tensors[from].cells_of(chunk.box);
    const auto dst_cells = grid_.tensors[to].cells_of(chunk.dst_box);
    if (src_cells.size() != dst_cells.size()) return;  // cannot happen: cuts are carried
    std::vector<std::int64_t> delta(chunk.box.offset.size());
    for (std::size_t d = 0; d < delta.size(); ++d) delta[d] = chunk.dst_box.offset[d] - chunk.box.offset[d];
    // Read everything first: a chunk may read and write overlapping cells of one rank.
    const auto& src_state = state(chunk.src, from);
    std::vector<int> sent(src_cells.size());
    for (std::size_t i = 0; i < src_cells.size(); ++i)
      sent[i] = values_.shifted(src_state.value[static_cast<std::size_t>(src_cells[i])], delta);
    auto& dst_state = state(chunk.dst, to);
    for (std::size_t i = 0; i < dst_cells.size(); ++i) {
      const auto cell = static_cast<std::size_t>(dst_cells[i]);
      if (chunk.op == ChunkOp::copy) {
        dst_state.value[cell] = sent[i];
        ++dst_state.deliveries[cell];
      } else {
        dst_state.value[cell] = values_.add(dst_state.value[cell], sent[i]);
      }
      if (dst_state.first_writer[cell] < 0) dst_state.first_writer[cell] = chunk.id;
      dst_state.last_writer[cell] = chunk.id;
    }
    check_input_overwrite(chunk, to);
  }

  // An all-gather rank's own shard and an all-to-all input are what the others read; writing
  // into them destroys data the promise depends on. A staged reduce-scatter's input is both
  // the partials the others read and the consumer's output; its own slot is never filled.
  void check_input_overwrite(const Chunk& chunk, int to) {
    if (staged_) {
      check_staged_overwrite(chunk, to);
      return;
    }
    if (to == input_tensor_) {
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}, the all-gather's input: rank {}'s own shard, "
                            "which its local chunk and the others read",
                            chunk.id, describe_route(chunk), describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst,
                            chunk.dst));
      return;
    }
    if (to != coll_tensor_) return;
    if (input_tensor_ >= 0) return;  // the own shard is delivered like the others
    if (coll_.kind == Collective::all_gather) {
      const Box own = shard_box(to, chunk.dst);
      if (!own.overlaps(chunk.dst_box)) return;
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}, inside shard {} ({}), which is "
                            "rank {}'s own input",
                            chunk.id, describe_route(chunk), describe_box(coll_.tensor, intersect(own, chunk.dst_box)),
                            chunk.dst, chunk.dst, describe_box(coll_.tensor, own), chunk.dst));
    } else if (coll_.kind == Collective::all_to_all) {
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}, which is all-to-all input; "
                            "results belong in '{}'",
                            chunk.id, describe_route(chunk), describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst,
                            coll_.output));
    }
  }

  void check_staged_overwrite(const Chunk& chunk, int to) {
    if (to == coll_tensor_ && coll_.kind == Collective::all_reduce) {
      // The results of the others land here; the own shard is the consumer's.
      const Box own = shard_box(to, chunk.dst);
      if (!own.overlaps(chunk.dst_box)) return;
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}, inside shard {} ({}), which rank "
                            "{}'s consumer reduces and writes itself",
                            chunk.id, describe_route(chunk), describe_box(coll_.tensor, intersect(own, chunk.dst_box)),
                            chunk.dst, chunk.dst, describe_box(coll_.tensor, own), chunk.dst));
    } else if (to == coll_tensor_) {
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}: in a staged reduce-scatter '{}' "
                            "holds the partials the others read and the consumer's result; "
                            "partials belong in '{}'",
                            chunk.id, describe_route(chunk), describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst,
                            coll_.tensor, coll_.output));
    } else if (to == output_tensor_ && chunk.dst_box.offset[0] <= chunk.dst &&
               chunk.dst < chunk.dst_box.offset[0] + chunk.dst_box.extent[0]) {
      sink_.add(kGroup, "own-shard-overwritten", chunk.dst, chunk.id,
                fmt::format("chunk {} ({}) writes {} on rank {}, inside slot {}: a rank's own "
                            "partial never goes through its staging tensor",
                            chunk.id, describe_route(chunk), describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst,
                            chunk.dst));
    }
  }

  // Staged reduce-scatter: slot `slot` of the staging tensor on `rank` holds rank `slot`'s
  // shard `rank` of the input, moved to the slot's place.
  int staged_partial(int rank, int slot) {
    std::vector<std::int64_t> delta(static_cast<std::size_t>(dims_), 0);
    delta[0] = slot;
    delta[static_cast<std::size_t>(coll_.dim)] = -even_split(shard_size_, world_, rank).begin;
    return values_.shifted(values_.origin(coll_tensor_, dims_, slot), delta);
  }

  // The value promised at the end in `cell` of `tensor` on `rank`, or -1 for no promise.
  int promised(int rank, int tensor, const Box& cell, int& shard) {
    // Only the collective's tensors carry a promise; other tensors (scratch, staging) may even
    // have fewer dims than the collective's dim.
    if (tensor != coll_tensor_ && tensor != output_tensor_) return -1;
    if (staged_ && tensor == output_tensor_) {
      shard = static_cast<int>(cell.offset[0]);  // the slot
      if (shard == rank) return -1;              // never written: checked on write
      return staged_partial(rank, shard);
    }
    if (staged_) {
      // Reduce-scatter: the consumer writes the input, checked on write. All-reduce: shard q of
      // every other rank gets rank q's shard q, which its consumer reduced (in place).
      shard = shard_of(cell);
      if (coll_.kind != Collective::all_reduce || shard == rank) return -1;
      return values_.origin(coll_tensor_, dims_, shard);
    }
    shard = shard_of(cell);
    switch (coll_.kind) {
      case Collective::all_gather:
        // The own shard is checked on write, unless it is delivered from the input.
        if (tensor != coll_tensor_ || (shard == rank && input_tensor_ < 0)) return -1;
        return values_.origin(coll_tensor_, dims_, shard);
      case Collective::reduce_scatter:
        if (tensor != coll_tensor_ || shard != rank) return -1;
        return reduced();
      case Collective::all_reduce:
        if (tensor != coll_tensor_) return -1;
        return reduced();
      case Collective::all_to_all: {
        if (tensor != output_tensor_) return -1;
        // Block `shard` of the output on `rank` holds block `rank` of the input of rank `shard`.
        std::vector<std::int64_t> delta(static_cast<std::size_t>(dims_), 0);
        delta[static_cast<std::size_t>(coll_.dim)] =
            even_split(shard_size_, world_, shard).begin - even_split(shard_size_, world_, rank).begin;
        return values_.shifted(values_.origin(coll_tensor_, dims_, shard), delta);
      }
      case Collective::custom:
        return -1;
    }
    return -1;
  }
  // Every rank's partial counted once.
  int reduced() {
    if (reduced_ < 0) {
      reduced_ = values_.origin(coll_tensor_, dims_, 0);
      for (int r = 1; r < world_; ++r) reduced_ = values_.add(reduced_, values_.origin(coll_tensor_, dims_, r));
    }
    return reduced_;
  }

  void check_promise() {
    std::map<FindingKey, Finding> findings;
    for (int r = 0; r < world_; ++r) {
      for (int t = 0; t < static_cast<int>(grid_.tensors.size()); ++t) {
        auto& s = state(r, t);
        for (std::int64_t cell = 0; cell < grid_.tensors[t].cells; ++cell) {
          if (t != coll_tensor_ && t != output_tensor_) break;
          const Box box = grid_.tensors[t].cell_box(cell);
          int shard = -1;
          const int expected = promised(r, t, box, shard);
          if (expected < 0) continue;
          const auto c = static_cast<std::size_t>(cell);
          auto note = [&](int kind, int value) {
            Finding& f = findings[{r, t, shard, kind, value}];
            grow(f.bounds, box);
            if (f.chunk < 0) f.chunk = s.last_writer[c];
            if (f.first_writer < 0) f.first_writer = s.first_writer[c];
            f.deliveries = std::max(f.deliveries, s.deliveries[c]);
          };
          if (s.value[c] != expected) note(kWrongValue, s.value[c]);
          if (s.deliveries[c] > 1) note(kDeliveredTwice, expected);
        }
      }
    }
    for (const auto& [key, finding] : findings) {
      const auto [rank, tensor, shard, kind, value] = key;
      if (kind == kDeliveredTwice) {
        report_twice(rank, tensor, shard, finding);
      } else {
        report_wrong(rank, tensor, shard, value, finding);
      }
    }
  }

  std::string what_belongs(int rank, int tensor, int shard) const {
    if (staged_ && tensor == output_tensor_)
      return fmt::format("staging slot {}: rank {}'s partial of shard {} of '{}'", shard, shard, rank, coll_.tensor);
    if (staged_) return fmt::format("shard {}: rank {}'s reduced result", shard, shard);
    switch (coll_.kind) {
      case Collective::all_gather:
        return fmt::format("shard {}, owned by rank {}", shard, shard);
      case Collective::all_to_all:
        return fmt::format("block {}, sent by rank {} from its block {}", shard, shard, rank);
      default:
        return fmt::format("the sum of all {} partials", world_);
    }
  }

  void report_twice(int rank, int tensor, int shard, const Finding& f) {
    sink_.add(kGroup, "shard-delivered-twice", rank, f.chunk,
              fmt::format("rank {} receives {} ({}) {} times: first by chunk {}, last by chunk {}", rank,
                          describe_box(grid_.names[tensor], f.bounds), what_belongs(rank, tensor, shard), f.deliveries,
                          f.first_writer, f.chunk));
  }

  void report_wrong(int rank, int tensor, int shard, int value, const Finding& f) {
    const std::string region = describe_box(grid_.names[tensor], f.bounds);
    // A staged all-reduce's shard still holding the rank's own partial: nothing arrived.
    const bool never_replaced = staged_ && tensor == coll_tensor_ && value == values_.origin(coll_tensor_, dims_, rank);
    if (value == ValueTable::kUndefined || never_replaced) {
      sink_.add(
          kGroup, "missing-shard", rank, f.chunk,
          fmt::format("rank {} never receives {} ({}){}", rank, region, what_belongs(rank, tensor, shard),
                      f.chunk >= 0 && !never_replaced ? fmt::format("; chunk {} wrote undefined data there", f.chunk)
                                                      : std::string()));
      return;
    }
    const SymbolicValue& v = values_.get(value);
    const bool reduction = coll_.kind == Collective::reduce_scatter || coll_.kind == Collective::all_reduce;
    const bool in_place = !staged_ && tensor == coll_tensor_ && v.tensor == coll_tensor_ &&
                          std::all_of(v.shift.begin(), v.shift.end(), [](std::int64_t s) { return s == 0; });
    if (reduction && in_place) {
      std::vector<int> missing, doubled;
      std::vector<std::string> counts;
      std::vector<int> count(static_cast<std::size_t>(world_), 0);
      for (const auto& [r, n] : v.contributions) count[static_cast<std::size_t>(r)] = n;
      for (int r = 0; r < world_; ++r) {
        if (count[r] == 0) missing.push_back(r);
        if (count[r] > 1) {
          doubled.push_back(r);
          counts.push_back(fmt::format("rank {} {} times", r, count[r]));
        }
      }
      if (!missing.empty()) {
        sink_.add(kGroup, "contribution-missing", rank, f.chunk,
                  fmt::format("{} on rank {} lacks the contribution of rank{} {} (it holds {})", region, rank,
                              missing.size() == 1 ? "" : "s", fmt::join(missing, ", "),
                              values_.describe(value, grid_.names)));
      }
      if (!doubled.empty()) {
        sink_.add(kGroup, "contribution-counted-twice", rank, f.chunk,
                  fmt::format("{} on rank {} counts the contribution of {}", region, rank, fmt::join(counts, ", ")));
      }
      return;
    }
    sink_.add(kGroup, "wrong-data", rank, f.chunk,
              fmt::format("{} on rank {} should hold {} but holds {}", region, rank, what_belongs(rank, tensor, shard),
                          values_.describe(value, grid_.names)));
  }

  const CommPlan& plan_;
  const GraphFacts& facts_;
  PlanGrid grid_;
  ViolationSink& sink_;
  const CollectiveSpec& coll_;
  int world_;
  int coll_tensor_ = -1;
  int output_tensor_ = -1;
  int input_tensor_ = -1;  // an all-gather's input (comm_plan.hpp), or -1
  bool staged_ = false;    // a reduce-scatter into a staging tensor (comm_plan.hpp)
  int dims_ = 0;
  std::int64_t shard_size_ = 0;
  int reduced_ = -1;
  ValueTable values_;
  std::vector<RankTensorState> states_;  // by rank * tensors + tensor
};

}  // namespace

void check_coverage(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink) {
  if (plan.collective.kind == Collective::custom) return;  // no promise to check
  std::string why;
  auto grid = build_plan_grid(plan, kMaxCells, why);
  if (!grid) {
    sink.add(kGroup, "coverage-too-complex", -1, -1, fmt::format("cannot prove coverage: {}", why));
    return;
  }
  if (replay_visits(plan, *grid) > kMaxCellVisits) {
    sink.add(kGroup, "coverage-too-complex", -1, -1,
             fmt::format("cannot prove coverage: the chunks' boxes overlap so much that the "
                         "replay would visit more than {} cells",
                         kMaxCellVisits));
    return;
  }
  CoverageReplay(plan, facts, std::move(*grid), sink).run();
}

}  // namespace syncopate::plan::verify_detail
