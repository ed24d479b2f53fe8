// throw_cuda(): see cuda_check.hpp.
#include "cuda_check.hpp"

#include <fmt/format.h>

#include "syncopate/common/error.hpp"

namespace syncopate::runtime::detail {

void throw_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  throw DeviceError(
      fmt::format("{}:{}: {} failed: {} ({})", file, line, expr, cudaGetErrorString(err), cudaGetErrorName(err)));
}

}  // namespace syncopate::runtime::detail
