// Symbolic values of the coverage replay. A cell does not hold numbers but *what* it holds:
// which tensor the data came from, how far it was moved, and how many times each rank's
// original data was added into it. Values are interned, so a cell stores one int and copying
// a cell copies that int. Internal to the verifier.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace syncopate::plan::verify_detail {

struct SymbolicValue {
  // Index of the tensor the data originally lived in, or kNoTensor for the two special values.
  int tensor = -1;
  // Current coordinate - original coordinate, per dim (moves such as all-to-all shift data).
  std::vector<std::int64_t> shift;
  // (origin rank, times counted), ascending by rank. Plain data of rank r is {(r, 1)}.
  std::vector<std::pair<int, int>> contributions;

  auto operator<=>(const SymbolicValue&) const = default;
};

class ValueTable {
 public:
  static constexpr int kUndefined = 0;  // uninitialised memory (e.g. an output before delivery)
  static constexpr int kMixed = 1;      // a sum of data from different tensors or positions

  ValueTable();
  // Rank `rank`'s original data of tensor `tensor` (with `dims` dims), in place.
  int origin(int tensor, int dims, int rank);
  // `id` moved by `delta` (destination offset - source offset).
  int shifted(int id, const std::vector<std::int64_t>& delta);
  // The value of adding two values (reduce-add).
  int add(int a, int b);
  const SymbolicValue& get(int id) const { return values_[static_cast<std::size_t>(id)]; }
  // "'x' of rank 2", "the sum of 'x' of ranks 0, 1 (rank 1 twice)", "undefined data", ...
  std::string describe(int id, const std::vector<std::string>& tensor_names) const;

 private:
  int intern(SymbolicValue value);

  std::vector<SymbolicValue> values_;
  std::map<SymbolicValue, int> index_;
  std::unordered_map<std::uint64_t, int> sums_;  // (a, b) with a <= b -> a + b
};

}  // namespace syncopate::plan::verify_detail
