// Interned symbolic values of the coverage replay (see verify_values.hpp).
#include "verify_values.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace syncopate::plan::verify_detail {

ValueTable::ValueTable() {
  intern({-1, {}, {}});  // kUndefined
  intern({-2, {}, {}});  // kMixed
}

int ValueTable::intern(SymbolicValue value) {
  auto [it, inserted] = index_.emplace(std::move(value), static_cast<int>(values_.size()));
  if (inserted) values_.push_back(it->first);
  return it->second;
}

int ValueTable::origin(int tensor, int dims, int rank) {
  return intern({tensor, std::vector<std::int64_t>(static_cast<std::size_t>(dims), 0), {{rank, 1}}});
}

int ValueTable::shifted(int id, const std::vector<std::int64_t>& delta) {
  if (id == kUndefined || id == kMixed) return id;
  if (std::all_of(delta.begin(), delta.end(), [](std::int64_t d) { return d == 0; })) return id;
  SymbolicValue moved = get(id);
  for (std::size_t d = 0; d < moved.shift.size() && d < delta.size(); ++d) moved.shift[d] += delta[d];
  return intern(std::move(moved));
}

int ValueTable::add(int a, int b) {
  if (a == kUndefined || b == kUndefined) return kUndefined;
  if (a == kMixed || b == kMixed) return kMixed;
  if (a > b) std::swap(a, b);
  const std::uint64_t key = (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
  if (auto it = sums_.find(key); it != sums_.end()) return it->second;
  const SymbolicValue& x = get(a);
  const SymbolicValue& y = get(b);
  int result = kMixed;
  if (x.tensor == y.tensor && x.shift == y.shift) {
    SymbolicValue sum{x.tensor, x.shift, {}};
    // Merge two rank-sorted lists, adding counts of the same rank.
    std::size_t i = 0, j = 0;
    while (i < x.contributions.size() || j < y.contributions.size()) {
      if (j == y.contributions.size() ||
          (i < x.contributions.size() && x.contributions[i].first < y.contributions[j].first)) {
        sum.contributions.push_back(x.contributions[i++]);
      } else if (i == x.contributions.size() || y.contributions[j].first < x.contributions[i].first) {
        sum.contributions.push_back(y.contributions[j++]);
      } else {
        sum.contributions.push_back({x.contributions[i].first, x.contributions[i].second + y.contributions[j].second});
        ++i;
        ++j;
      }
    }
    result = intern(std::move(sum));
  }
  sums_.emplace(key, result);
  return result;
}

std::string ValueTable::describe(int id, const std::vector<std::string>& tensor_names) const {
  if (id == kUndefined) return "undefined data";
  if (id == kMixed) return "a sum of data from different tensors or positions";
  const SymbolicValue& v = get(id);
  std::vector<int> ranks;
  std::vector<std::string> repeated;
  for (const auto& [rank, count] : v.contributions) {
    ranks.push_back(rank);
    if (count > 1) repeated.push_back(fmt::format("rank {} {} times", rank, count));
  }
  std::string out =
      fmt::format("'{}' of rank{} {}", tensor_names.at(v.tensor), ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
  if (ranks.size() > 1 || !repeated.empty()) out = "the sum of " + out;
  if (!repeated.empty()) out += fmt::format(" ({})", fmt::join(repeated, ", "));
  if (std::any_of(v.shift.begin(), v.shift.end(), [](std::int64_t s) { return s != 0; }))
    out += fmt::format(" moved by ({})", fmt::join(v.shift, ", "));
  return out;
}

}  // namespace syncopate::plan::verify_detail
