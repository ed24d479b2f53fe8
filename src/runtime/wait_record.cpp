// format_timeout(): see wait_record.hpp.
#include "syncopate/runtime/wait_record.hpp"

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/runtime/rank_schedule.hpp"

namespace syncopate::runtime {
namespace {

std::string_view kind_name(std::int32_t kind) {
  if (kind < 0 || kind > static_cast<std::int32_t>(WaitKind::nccl)) return "unknown";
  return to_string(static_cast<WaitKind>(kind));
}

std::string_view likely_cause(std::int32_t kind) {
  switch (static_cast<WaitKind>(kind)) {
    case WaitKind::landing:
      return "the chunk never landed: its backend did not run, or a peer stopped";
    case WaitKind::ready:
      return "the producer tiles of the chunk's source box never finished";
    case WaitKind::dst_ready:
      return "the producer tiles of the chunk's destination box never finished";
    case WaitKind::entry:
      return "the source rank never started this call";
    case WaitKind::exit:
      return "a peer never finished the previous call";
    case WaitKind::nccl:
      return "an NCCL send/recv never completed: its peer never posted the matching call, or stopped; "
             "the communicator was aborted";
  }
  return "unknown wait";
}

}  // namespace

std::string format_timeout(const WaitRecord& r) {
  // The NCCL watchdog's record: no slot; `owner` is the peer and `chunk` the first member.
  if (r.kind == static_cast<std::int32_t>(WaitKind::nccl))
    return fmt::format("rank {}: wait timed out after {} ms: NCCL call (chunk {}) with rank {} did not complete ({})",
                       r.rank, r.bound_ns / 1'000'000, r.chunk, r.owner, likely_cause(r.kind));
  const std::string chunk = r.chunk >= 0 ? fmt::format(" (chunk {})", r.chunk) : std::string();
  return fmt::format("rank {}: wait timed out after {} ms: {} slot {} on rank {}{} expected >= {}, seen {} ({})",
                     r.rank, r.bound_ns / 1'000'000, kind_name(r.kind), r.slot, r.owner, chunk, r.expected, r.seen,
                     likely_cause(r.kind));
}

void throw_if_timed_out(const WaitRecord& record) {
  if (record.flag != 0) throw WaitTimeoutError(format_timeout(record));
}

}  // namespace syncopate::runtime
