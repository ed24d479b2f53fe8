// Well-formed rules for NCCL groups (Chunk::group): which chunks may join one, where its members
// sit in a rank's issue lists, and a bound on the happens-before edges groups create.
//
// A group is issued between one ncclGroupStart/End on each rank that lists its members, after
// every member's deps have landed; its members then progress together. These rules make that
// execution exist: members are NCCL sends/recvs (a local copy or a copy-engine chunk is not an
// NCCL call), they are consecutive in one stream (the runtime cannot interleave other chunks
// into one group call), and no member waits for another (the group would wait for itself).
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "syncopate/plan/dependency_graph.hpp"
#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::well_formed;
// Group steps add |a| x |b| edges between neighbouring steps; the graph may grow to this many
// per listed chunk, plus a fixed allowance for a few large groups (a hand-written one-shot
// exchange), before the plan is refused as too complex to analyse.
constexpr std::int64_t kEdgesPerListing = 4;
constexpr std::int64_t kEdgeAllowance = std::int64_t{1} << 20;

class GroupChecker {
 public:
  GroupChecker(const CommPlan& plan, ViolationSink& sink) : plan_(plan), sink_(sink) {}

  void run() {
    for (std::size_t i = 0; i < plan_.chunks.size(); ++i) check_member(static_cast<int>(i));
    std::int64_t listings = 0, edges = 0;
    for (const auto& program : plan_.ranks) {
      std::map<int, int> stream_of_group;  // group -> first stream listing it on this rank
      for (std::size_t s = 0; s < program.streams.size(); ++s) {
        const auto& list = program.streams[s];
        listings += static_cast<std::int64_t>(list.size());
        check_list(program.rank, static_cast<int>(s), list, stream_of_group);
        edges += edge_count(list);
      }
    }
    if (edges > kEdgesPerListing * listings + kEdgeAllowance)
      sink_.add(kGroup, "groups-too-complex", -1, -1,
                fmt::format("the NCCL groups make {} happens-before edges between neighbouring steps for {} "
                            "listed chunks (at most {} per listing + {}); use smaller groups",
                            edges, listings, kEdgesPerListing, kEdgeAllowance));
  }

 private:
  bool valid(int id) const { return id >= 0 && id < static_cast<int>(plan_.chunks.size()); }

  void check_member(int id) {
    const Chunk& c = plan_.chunks[static_cast<std::size_t>(id)];
    if (c.group == kNoGroup) return;
    if (c.group < 0) {
      sink_.add(kGroup, "group-out-of-range", c.src, id,
                fmt::format("group {} is negative; a group number is >= 0 ({} means no group)", c.group, kNoGroup));
    } else if (c.backend != Backend::nccl) {
      sink_.add(kGroup, "group-not-nccl", c.src, id,
                fmt::format("chunk {} ({}) is in group {} but uses the {} backend; only NCCL sends and "
                            "recvs can be issued in one ncclGroupStart/End",
                            id, describe_route(c), c.group, to_string(c.backend)));
    } else if (c.src == c.dst) {
      sink_.add(kGroup, "group-local-chunk", c.src, id,
                fmt::format("chunk {} is a local copy on rank {} (src == dst), not an NCCL send/recv; it "
                            "cannot join group {}",
                            id, c.src, c.group));
    }
  }

  void check_list(int rank, int stream, const std::vector<int>& list, std::map<int, int>& stream_of_group) {
    std::map<int, std::size_t> last_position;  // group -> where its latest run on this list ends
    const auto steps = issue_steps(plan_, list);
    for (const auto& step : steps) {
      const int first = list[step.begin];
      if (!valid(first) || plan_.chunks[first].group < 0) continue;
      const int group = plan_.chunks[first].group;
      auto [it, fresh] = stream_of_group.try_emplace(group, stream);
      if (!fresh && it->second != stream) {
        sink_.add(kGroup, "group-split-across-streams", rank, first,
                  fmt::format("rank {} lists chunks of NCCL group {} in stream {} and in stream {} (chunk {}); "
                              "one group is issued in one stream",
                              rank, group, it->second, stream, first));
      } else if (auto seen = last_position.find(group); seen != last_position.end()) {
        const int between = list[seen->second];
        sink_.add(kGroup, "group-not-consecutive", rank, first,
                  fmt::format("rank {} stream {} lists chunk {} of NCCL group {} at position {}, after chunk {} "
                              "(position {}) broke the group off; a group's members must be consecutive",
                              rank, stream, first, group, step.begin, between, seen->second));
      }
      last_position[group] = step.end;
      check_inner_deps(rank, list, step, group);
    }
  }

  // A member this rank sends waits for its deps before the group is issued: none may be in the
  // same group on this rank.
  void check_inner_deps(int rank, const std::vector<int>& list, const IssueStep& step, int group) {
    std::set<int> members;
    for (std::size_t i = step.begin; i < step.end; ++i) members.insert(list[i]);
    for (std::size_t i = step.begin; i < step.end; ++i) {
      const int id = list[i];
      if (!valid(id) || plan_.chunks[id].src != rank) continue;
      for (int dep : plan_.chunks[id].deps)
        if (dep != id && members.contains(dep))
          sink_.add(kGroup, "group-dep-inside-group", rank, id,
                    fmt::format("chunk {} depends on chunk {}, but rank {} issues both in NCCL group {}: a "
                                "group starts once its members' deps have landed, so it would wait for itself",
                                id, dep, rank, group));
    }
  }

  std::int64_t edge_count(const std::vector<int>& list) const {
    std::int64_t edges = 0;
    const auto steps = issue_steps(plan_, list);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto size = static_cast<std::int64_t>(steps[i].end - steps[i].begin);
      if (i + 1 < steps.size()) edges += size * static_cast<std::int64_t>(steps[i + 1].end - steps[i + 1].begin);
      if (size < 2) continue;
      for (std::size_t m = steps[i].begin; m < steps[i].end; ++m)
        if (valid(list[m])) edges += static_cast<std::int64_t>(plan_.chunks[list[m]].deps.size()) * (size - 1);
    }
    return edges;
  }

  const CommPlan& plan_;
  ViolationSink& sink_;
};

}  // namespace

void check_groups(const CommPlan& plan, ViolationSink& sink) { GroupChecker(plan, sink).run(); }

}  // namespace syncopate::plan::verify_detail
