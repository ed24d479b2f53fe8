// Rule group "well-formed": everything the other groups take for granted. Ranges, tensors,
// boxes, dtypes, issue lists, deps and the collective's own fields. Every check guards the
// next one, so nothing here indexes out of range or overflows on hostile input.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::well_formed;

class WellFormedChecker {
 public:
  WellFormedChecker(const CommPlan& plan, ViolationSink& sink) : plan_(plan), sink_(sink) {}

  void run() {
    check_header();
    check_tensors();
    check_collective();
    // Ranks index into per-rank tables below; a wrong count makes them meaningless.
    ranks_ok_ = check_ranks();
    for (const auto& chunk : plan_.chunks) check_chunk(chunk);
    if (ranks_ok_) check_issue_lists();
  }

 private:
  void report(std::string rule, int rank, int chunk, std::string detail) {
    sink_.add(kGroup, std::move(rule), rank, chunk, std::move(detail));
  }
  bool rank_in_range(int r) const { return r >= 0 && r < plan_.world_size; }
  int chunk_count() const { return static_cast<int>(plan_.chunks.size()); }

  void check_header() {
    if (plan_.version != kPlanVersion)
      report("unsupported-version", -1, -1,
             fmt::format("plan version is {}, this verifier reads version {}", plan_.version, kPlanVersion));
    if (plan_.world_size < 1)
      report("world-size", -1, -1, fmt::format("world_size is {}, it must be at least 1", plan_.world_size));
  }

  void check_tensors() {
    for (const auto& [name, spec] : plan_.tensors) {
      if (spec.shape.empty()) {
        report("bad-tensor-shape", -1, -1, fmt::format("tensor '{}' has an empty shape", name));
        continue;
      }
      std::int64_t elements = 1;
      for (std::size_t d = 0; d < spec.shape.size(); ++d) {
        if (spec.shape[d] < 1) {
          report("bad-tensor-shape", -1, -1,
                 fmt::format("tensor '{}' dim {} has size {}, it must be at least 1", name, d, spec.shape[d]));
          break;
        }
        if (__builtin_mul_overflow(elements, spec.shape[d], &elements)) {
          report("bad-tensor-shape", -1, -1,
                 fmt::format("tensor '{}' shape {} has more elements than fit in 64 bits", name, spec.shape));
          break;
        }
      }
    }
  }

  const TensorSpec* tensor(const std::string& name) const {
    auto it = plan_.tensors.find(name);
    return it == plan_.tensors.end() ? nullptr : &it->second;
  }
  bool tensor_usable(const TensorSpec* spec) const {
    if (spec == nullptr || spec->shape.empty()) return false;
    for (auto s : spec->shape)
      if (s < 1) return false;
    return true;
  }

  void check_collective() {
    const auto& c = plan_.collective;
    if (c.kind == Collective::custom) return;
    const auto kind = to_string(c.kind);
    const TensorSpec* spec = tensor(c.tensor);
    if (spec == nullptr) {
      report("collective-tensor", -1, -1, fmt::format("{} names tensor '{}', which is not in tensors", kind, c.tensor));
      return;
    }
    if (!tensor_usable(spec)) return;  // already reported as bad-tensor-shape
    const int dims = static_cast<int>(spec->shape.size());
    if (c.dim < 0 || c.dim >= dims) {
      report("collective-dim", -1, -1,
             fmt::format("{} dim is {} but tensor '{}' has {} dims", kind, c.dim, c.tensor, dims));
      return;
    }
    if (c.staged()) {
      check_staging(*spec);
      return;
    }
    if (!c.input.empty()) check_input(*spec);
    if (c.kind != Collective::all_to_all) {
      if (!c.output.empty())
        report("collective-output", -1, -1,
               fmt::format("{} names output '{}', but only all-to-all (its output), "
                           "reduce-scatter and all-reduce (their staging tensor) take one",
                           kind, c.output));
      return;
    }
    const TensorSpec* out = tensor(c.output);
    if (out == nullptr || c.output == c.tensor) {
      report("collective-output", -1, -1,
             fmt::format("all-to-all output '{}' must be a tensor of the plan other than '{}'", c.output, c.tensor));
    } else if (out->shape != spec->shape || out->dtype != spec->dtype) {
      report("collective-output", -1, -1,
             fmt::format("all-to-all output '{}' is {} {} but input '{}' is {} {}; they must match", c.output,
                         to_string(out->dtype), out->shape, c.tensor, to_string(spec->dtype), spec->shape));
    }
    if (plan_.world_size >= 1 && spec->shape[c.dim] % plan_.world_size != 0) {
      report("collective-indivisible", -1, -1,
             fmt::format("all-to-all splits dim {} of '{}' (size {}) into {} equal blocks, but {} "
                         "is not a multiple of {}",
                         c.dim, c.tensor, spec->shape[c.dim], plan_.world_size, spec->shape[c.dim], plan_.world_size));
    }
  }

  // An all-gather from an input tensor (comm_plan.hpp): I is `tensor` with dim S / world.
  void check_input(const TensorSpec& gathered) {
    const auto& c = plan_.collective;
    const TensorSpec* in = tensor(c.input);
    if (c.kind != Collective::all_gather) {
      report("collective-input", -1, -1,
             fmt::format("{} names input '{}', but only an all-gather takes one (the tensor holding "
                         "each rank's own shard)",
                         to_string(c.kind), c.input));
      return;
    }
    if (in == nullptr || c.input == c.tensor) {
      report("collective-input", -1, -1,
             fmt::format("all-gather input '{}' must be a tensor of the plan other than '{}'", c.input, c.tensor));
      return;
    }
    if (!tensor_usable(in)) return;  // already reported as bad-tensor-shape
    const auto w = plan_.world_size;
    const auto size = gathered.shape[static_cast<std::size_t>(c.dim)];
    if (w < 1) return;  // reported by check_header
    if (size % w != 0) {
      report("collective-indivisible", -1, -1,
             fmt::format("all-gather from input '{}' splits dim {} of '{}' (size {}) into {} equal shards, but {} "
                         "is not a multiple of {}",
                         c.input, c.dim, c.tensor, size, w, size, w));
      return;
    }
    auto want = gathered.shape;
    want[static_cast<std::size_t>(c.dim)] = size / w;
    if (in->shape != want || in->dtype != gathered.dtype) {
      report("collective-input", -1, -1,
             fmt::format("all-gather input '{}' is {} {} but must be {} {} (one shard of '{}' along dim {})", c.input,
                         to_string(in->dtype), in->shape, to_string(gathered.dtype), want, c.tensor, c.dim));
    }
  }

  // A staged reduction (comm_plan.hpp): input [1, .., S, ..], staging [W, .., S/W, ..].
  void check_staging(const TensorSpec& in) {
    const auto& c = plan_.collective;
    const auto kind = to_string(c.kind);
    const TensorSpec* out = tensor(c.output);
    if (out == nullptr || c.output == c.tensor) {
      report("collective-output", -1, -1,
             fmt::format("{} staging '{}' must be a tensor of the plan other than '{}'", kind, c.output, c.tensor));
      return;
    }
    if (!tensor_usable(out)) return;  // already reported as bad-tensor-shape
    if (out->dtype != in.dtype) {
      report("collective-output", -1, -1,
             fmt::format("{} staging '{}' is {} but input '{}' is {}; they must match", kind, c.output,
                         to_string(out->dtype), c.tensor, to_string(in.dtype)));
    }
    if (c.dim == 0 || in.shape[0] != 1) {
      report("collective-output", -1, -1,
             fmt::format("staged {} of '{}' {} along dim {}: the input needs a unit dim 0 (the "
                         "staging tensor's slot index) and a scatter dim after it",
                         kind, c.tensor, in.shape, c.dim));
      return;
    }
    const auto w = plan_.world_size;
    const auto size = in.shape[static_cast<std::size_t>(c.dim)];
    if (w < 1) return;  // reported by check_header
    if (size % w != 0) {
      report("collective-indivisible", -1, -1,
             fmt::format("staged {} splits dim {} of '{}' (size {}) into {} equal slots, but {} "
                         "is not a multiple of {}",
                         kind, c.dim, c.tensor, size, w, size, w));
      return;
    }
    auto want = in.shape;
    want[0] = w;
    want[static_cast<std::size_t>(c.dim)] = size / w;
    if (out->shape != want) {
      report("collective-output", -1, -1,
             fmt::format("{} staging '{}' is {} but must be {} (one slot per rank along dim 0, "
                         "one shard of '{}' {} along dim {})",
                         kind, c.output, out->shape, want, c.tensor, in.shape, c.dim));
    }
  }

  bool check_ranks() {
    if (plan_.world_size < 1) return false;
    if (static_cast<long long>(plan_.ranks.size()) != plan_.world_size) {
      report("rank-count", -1, -1,
             fmt::format("world_size is {} but ranks lists {} programs", plan_.world_size, plan_.ranks.size()));
      return false;
    }
    bool ok = true;
    for (std::size_t r = 0; r < plan_.ranks.size(); ++r) {
      if (plan_.ranks[r].rank != static_cast<int>(r)) {
        report("rank-index", static_cast<int>(r), -1,
               fmt::format("ranks[{}].rank is {}; entry r must describe rank r", r, plan_.ranks[r].rank));
        ok = false;
      }
    }
    return ok;
  }

  // Checks one side (source or destination) of a chunk's box; returns whether it is usable.
  bool check_box(const Chunk& chunk, const char* side, int rank, const std::string& name, const Box& box) {
    const TensorSpec* spec = tensor(name);
    if (spec == nullptr) {
      report("unknown-tensor", rank, chunk.id, fmt::format("{} tensor '{}' is not in tensors", side, name));
      return false;
    }
    if (!tensor_usable(spec)) return false;
    const auto dims = spec->shape.size();
    if (box.offset.size() != dims || box.extent.size() != dims) {
      report("box-rank", rank, chunk.id,
             fmt::format("{} box has {} offsets and {} extents but tensor '{}' has {} dims", side, box.offset.size(),
                         box.extent.size(), name, dims));
      return false;
    }
    for (std::size_t d = 0; d < dims; ++d) {
      if (box.offset[d] < 0) {
        report("negative-offset", rank, chunk.id,
               fmt::format("{} box {} has offset {} in dim {}", side, describe_box(name, box), box.offset[d], d));
        return false;
      }
      if (box.extent[d] < 1) {
        report("non-positive-extent", rank, chunk.id,
               fmt::format("{} box {} has extent {} in dim {}", side, describe_box(name, box), box.extent[d], d));
        return false;
      }
      std::int64_t end = 0;
      const bool overflow = __builtin_add_overflow(box.offset[d], box.extent[d], &end);
      if (overflow || end > spec->shape[d]) {
        report("box-out-of-bounds", rank, chunk.id,
               fmt::format("{} box {} ends at {} in dim {} but tensor '{}' has size {} there", side,
                           describe_box(name, box), overflow ? std::string("more than 2^63") : fmt::to_string(end), d,
                           name, spec->shape[d]));
        return false;
      }
    }
    return true;
  }

  void check_chunk(const Chunk& chunk) {
    const int index = static_cast<int>(&chunk - plan_.chunks.data());
    if (chunk.id != index) {
      report("chunk-id", -1, index, fmt::format("chunks[{}] has id {}; ids must equal their index", index, chunk.id));
    }
    const int id = index;  // messages name the position, which is what tools index by
    const bool src_ok = rank_in_range(chunk.src);
    const bool dst_ok = rank_in_range(chunk.dst);
    if (!src_ok)
      report("rank-out-of-range", -1, id, fmt::format("src rank {} is outside 0..{}", chunk.src, plan_.world_size - 1));
    if (!dst_ok)
      report("rank-out-of-range", -1, id, fmt::format("dst rank {} is outside 0..{}", chunk.dst, plan_.world_size - 1));
    Chunk located = chunk;
    located.id = id;
    const bool src_box = check_box(located, "source", src_ok ? chunk.src : -1, chunk.tensor, chunk.box);
    const bool dst_box = check_box(located, "destination", dst_ok ? chunk.dst : -1, chunk.dst_tensor, chunk.dst_box);
    if (src_box && dst_box) {
      if (chunk.box.extent != chunk.dst_box.extent) {
        report("extent-mismatch", src_ok ? chunk.src : -1, id,
               fmt::format("source {} and destination {} have different extents", describe_box(chunk.tensor, chunk.box),
                           describe_box(chunk.dst_tensor, chunk.dst_box)));
      }
      const auto src_type = tensor(chunk.tensor)->dtype;
      const auto dst_type = tensor(chunk.dst_tensor)->dtype;
      if (src_type != dst_type) {
        report("dtype-mismatch", src_ok ? chunk.src : -1, id,
               fmt::format("moves {} tensor '{}' into {} tensor '{}'", to_string(src_type), chunk.tensor,
                           to_string(dst_type), chunk.dst_tensor));
      }
    }
    for (int dep : chunk.deps) {
      if (dep < 0 || dep >= chunk_count()) {
        report("unknown-dep", src_ok ? chunk.src : -1, id,
               fmt::format("depends on chunk {}, which does not exist (the plan has {} chunks)", dep, chunk_count()));
      } else if (dep == id) {
        report("self-dep", src_ok ? chunk.src : -1, id, "depends on itself");
      }
    }
    const auto kind = plan_.collective.kind;
    if (chunk.op == ChunkOp::reduce_add && (kind == Collective::all_gather || kind == Collective::all_to_all)) {
      report("op-not-allowed", dst_ok ? chunk.dst : -1, id,
             fmt::format("reduce-add into {} on rank {}: {} only moves data, it never adds",
                         describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst, to_string(kind)));
    }
    if (chunk.op == ChunkOp::reduce_add && plan_.collective.staged()) {
      report("op-not-allowed", dst_ok ? chunk.dst : -1, id,
             fmt::format("reduce-add into {} on rank {}: a staged {} only copies partials into "
                         "staging slots (and results out); the consumer adds them",
                         describe_box(chunk.dst_tensor, chunk.dst_box), chunk.dst, to_string(kind)));
    }
  }

  struct Listing {
    int rank;
    int stream;
  };

  void check_issue_lists() {
    std::vector<std::vector<Listing>> listings(plan_.chunks.size());
    for (const auto& program : plan_.ranks) {
      for (std::size_t s = 0; s < program.streams.size(); ++s) {
        for (int id : program.streams[s]) {
          if (id < 0 || id >= chunk_count()) {
            report("unknown-chunk-in-stream", program.rank, id,
                   fmt::format("stream {} of rank {} lists chunk {}, which does not exist", s, program.rank, id));
            continue;
          }
          listings[id].push_back({program.rank, static_cast<int>(s)});
        }
      }
    }
    for (std::size_t i = 0; i < plan_.chunks.size(); ++i)
      check_listing(plan_.chunks[i], static_cast<int>(i), listings[i]);
  }

  int stream_count(int rank) const {
    return static_cast<int>(plan_.ranks[static_cast<std::size_t>(rank)].streams.size());
  }

  void check_listing(const Chunk& chunk, int id, const std::vector<Listing>& listed) {
    if (!rank_in_range(chunk.src) || !rank_in_range(chunk.dst)) return;  // reported already
    const bool nccl = chunk.backend == Backend::nccl && chunk.src != chunk.dst;
    for (const auto& l : listed) {
      if (l.rank != chunk.src && l.rank != chunk.dst) {
        report("issuer-not-endpoint", l.rank, id,
               fmt::format("rank {} issues chunk {} ({}), but only its src or dst may", l.rank, id,
                           describe_route(chunk)));
      } else if (l.stream != chunk.stream) {
        report(
            "stream-mismatch", l.rank, id,
            fmt::format("listed in stream {} of rank {} but its stream field is {}", l.stream, l.rank, chunk.stream));
      }
    }
    auto listed_by = [&](int rank) {
      int n = 0;
      for (const auto& l : listed) n += l.rank == rank ? 1 : 0;
      return n;
    };
    if (listed.empty()) {
      const bool stream_exists =
          chunk.stream >= 0 && (chunk.stream < stream_count(chunk.src) || chunk.stream < stream_count(chunk.dst));
      if (!stream_exists) {
        report("stream-out-of-range", chunk.src, id,
               fmt::format("stream {} does not exist on rank {} ({} streams) nor on rank {} ({} "
                           "streams)",
                           chunk.stream, chunk.src, stream_count(chunk.src), chunk.dst, stream_count(chunk.dst)));
      } else {
        report("chunk-not-issued", chunk.src, id,
               fmt::format("chunk {} ({}) is in no issue list; list it in stream {} of {}", id, describe_route(chunk),
                           chunk.stream, nccl ? "both its src and its dst" : "its src or its dst"));
      }
      return;
    }
    if (!nccl) {
      if (listed.size() > 1) {
        report("chunk-issued-twice", listed[1].rank, id,
               fmt::format("chunk {} ({}, {}) is listed {} times (first by rank {}); a {} chunk "
                           "is issued once",
                           id, describe_route(chunk), to_string(chunk.backend), listed.size(), listed[0].rank,
                           to_string(chunk.backend)));
      }
      return;
    }
    // NCCL: a send in src's stream and the matching recv in dst's stream, once each.
    for (int rank : {chunk.src, chunk.dst}) {
      const int n = listed_by(rank);
      const char* side = rank == chunk.src ? "send" : "recv";
      if (n == 0) {
        report("nccl-unpaired", rank, id,
               fmt::format("NCCL chunk {} ({}) has no {} in rank {}'s streams; list it in stream "
                           "{} of both ranks",
                           id, describe_route(chunk), side, rank, chunk.stream));
      } else if (n > 1) {
        report("chunk-issued-twice", rank, id,
               fmt::format("NCCL chunk {} ({}) is listed {} times by rank {}; its {} is issued "
                           "once",
                           id, describe_route(chunk), n, rank, side));
      }
    }
  }

  const CommPlan& plan_;
  ViolationSink& sink_;
  bool ranks_ok_ = false;
};

}  // namespace

void check_well_formed(const CommPlan& plan, ViolationSink& sink) { WellFormedChecker(plan, sink).run(); }

}  // namespace syncopate::plan::verify_detail
