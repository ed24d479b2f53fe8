// Element-by-element replay of a plan, independent of the verifier (shared by the template
// coverage tests and the import tests).
//
// Replays a plan's chunks, element by element, onto per-rank copies of its tensors, in a random
// topological order of the happens-before graph (stream order + deps), and then checks the
// collective's promise from CollectiveSpec and even_split alone. Each element records how many
// times each rank's contribution reached it, and (all-to-all) which rank and input index it
// came from, so a missing shard, a double write or a double-counted contribution shows up.
// Races are found directly: two chunks touching one element, one of them writing (two adds
// commute and are allowed), with neither happening before the other.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan::element_replay {

struct Element {
  std::vector<int> contributions;  // by rank: how many times that rank's value is summed in
  int origin_rank = -1;            // all-to-all: the rank whose input this element came from
  std::int64_t origin_index = -1;  // all-to-all: its flat index in that rank's input
  int writes = 0;                  // chunks that landed on this element
  int copies = 0;                  // of which copies (an all-reduce's gather half)
  // Every chunk that read (src) or wrote (dst) this element, and how: 'r', 'c'opy, 'a'dd.
  std::vector<std::pair<int, char>> accesses;
};
using TensorState = std::vector<Element>;
using RankState = std::map<std::string, TensorState>;

struct ReplayResult {
  std::vector<RankState> ranks;
  std::vector<std::string> problems;
};

// Replays `plan` in the topological order that `seed` picks; problems found on the way (a
// deadlock, a race, a chunk that does not fit) are in ReplayResult::problems.
ReplayResult replay(const CommPlan& plan, unsigned seed);
// What is wrong with the replayed state against the collective's promise (first few); the
// replay's own problems first.
std::vector<std::string> check_promise(const CommPlan& plan, const ReplayResult& replayed);
std::vector<std::string> replay_and_check(const CommPlan& plan, unsigned seed);

}  // namespace syncopate::plan::element_replay
