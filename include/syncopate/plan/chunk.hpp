// A communication chunk: one box of a tensor moving from one rank to another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "syncopate/plan/enums.hpp"

namespace syncopate::plan {

// An axis-aligned region of an N-d tensor: offset[d] .. offset[d] + extent[d] on each dim d.
struct Box {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> extent;

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto e : extent) n *= e;
    return n;
  }
  bool overlaps(const Box& other) const {
    if (offset.size() != other.offset.size()) return false;
    for (std::size_t d = 0; d < offset.size(); ++d) {
      if (offset[d] + extent[d] <= other.offset[d]) return false;
      if (other.offset[d] + other.extent[d] <= offset[d]) return false;
    }
    return true;
  }
  bool contains(const Box& inner) const {
    if (offset.size() != inner.offset.size()) return false;
    for (std::size_t d = 0; d < offset.size(); ++d) {
      if (inner.offset[d] < offset[d]) return false;
      if (inner.offset[d] + inner.extent[d] > offset[d] + extent[d]) return false;
    }
    return true;
  }
  friend bool operator==(const Box&, const Box&) = default;
};

// The chunk `id` reads `box` of `tensor` on rank `src` and lands it in `dst_box` of `dst_tensor`
// on rank `dst` (by copy, or by adding into what is there), then raises one signal on `dst`.
//
// Invariants (checked by the verifier, not by construction):
// - id equals the chunk's index in CommPlan::chunks (ids are dense so tables index by id);
// - box and dst_box have the same extents; dst_tensor/dst_box are always filled in memory
//   (the JSON form may omit them when they equal tensor/box);
// - the chunk is issued, in stream `stream`, by its src rank or its dst rank (copy engine and
//   SM copy can push or pull through symmetric memory); an NCCL chunk is issued by both: the
//   send in src's stream `stream` and the matching recv in dst's stream `stream`;
// - every id in deps has landed before this chunk starts;
// - `group` (NCCL only; kNoGroup when absent): on each rank that lists the chunk, the chunks of
//   one stream carrying the same group number form one NCCL group. They must be consecutive in
//   that stream; the rank waits for every member's deps, issues them all between
//   ncclGroupStart and ncclGroupEnd so they progress together, and the next chunk of the stream
//   starts once all of them have landed. A ring step groups its send with its recv, which is
//   what keeps an NCCL ring from being a chain of rendezvous around the ring. A number names a
//   group within one rank's stream only: the chunk's send joins the group of that number on its
//   src, its recv the group of that number on its dst.
inline constexpr int kNoGroup = -1;

// Rows known only at run time (expert parallelism: how many tokens rank s routes to expert e
// is decided by the router, call by call). The chunk's box is its *capacity* along `dim`; each
// call it carries only the first `n` rows of it, where `n` is element `index` (flat, row-major)
// of the int32 tensor `counts` on the chunk's dst rank, 0 <= n <= capacity. That element is
// delivered by one chunk from the same src that happens before this one (the counts exchange),
// so the count a consumer reads after this chunk landed is this call's and the sender's. The
// chunk lands (and raises its signal) whatever n is, even 0, so the dependency graph, and with
// it deadlock freedom, does not depend on the counts. Verifier rules: docs/ARCHITECTURE.md.
struct RuntimeRows {
  int dim = 0;
  std::string counts;
  std::int64_t index = 0;

  friend bool operator==(const RuntimeRows&, const RuntimeRows&) = default;
};

struct Chunk {
  int id = -1;
  std::string tensor;
  Box box;
  std::string dst_tensor;
  Box dst_box;
  int src = 0;
  int dst = 0;
  Backend backend = Backend::copy_engine;
  ChunkOp op = ChunkOp::copy;
  int stream = 0;
  std::vector<int> deps;
  int group = kNoGroup;
  std::optional<RuntimeRows> runtime_rows;  // absent: the whole box moves every call

  friend bool operator==(const Chunk&, const Chunk&) = default;
};

}  // namespace syncopate::plan
