// int32 vectors handed to Python as numpy arrays (for kernels that take CSR tables, tile
// orders, ...). The array owns a copy of the data, so it outlives the C++ object it came from.
// numpy is imported only when such an array is returned; without it the call raises ImportError.
#pragma once

#include <cstdint>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace syncopate::python {

using Int32Array = nanobind::ndarray<nanobind::numpy, std::int32_t, nanobind::ndim<1>>;

// `values` holds int or int32_t (the same type on the platforms we build for).
template <class Int>
Int32Array to_numpy(const std::vector<Int>& values) {
  auto* owned = new std::vector<std::int32_t>(values.begin(), values.end());
  nanobind::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<std::int32_t>*>(p); });
  return Int32Array(owned->data(), {owned->size()}, owner);
}

}  // namespace syncopate::python
