// resident_blocks / shape_for_residency: see occupancy.hpp. Plain arithmetic, no CUDA.
#include "syncopate/runtime/occupancy.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"

namespace syncopate::runtime {
namespace {

std::int64_t round_up(std::int64_t x, std::int64_t unit) { return (x + unit - 1) / unit * unit; }

void require_positive(std::int64_t value, const char* field) {
  if (value <= 0) throw UserError(fmt::format("occupancy: {}: expected a number > 0, got {}", field, value));
}

void check_inputs(const KernelResources& k, const SmLimits& l) {
  require_positive(k.threads_per_block, "kernel.threads_per_block");
  if (k.registers_per_thread < 0 || k.static_smem_bytes < 0 || k.dynamic_smem_bytes < 0)
    throw UserError(
        fmt::format("occupancy: kernel: registers ({}), static ({}) and dynamic ({}) shared "
                    "memory must not be negative",
                    k.registers_per_thread, k.static_smem_bytes, k.dynamic_smem_bytes));
  require_positive(l.smem_per_sm, "limits.smem_per_sm");
  require_positive(l.smem_per_block_optin, "limits.smem_per_block_optin");
  require_positive(l.max_blocks_per_sm, "limits.max_blocks_per_sm");
  require_positive(l.max_threads_per_sm, "limits.max_threads_per_sm");
  require_positive(l.registers_per_sm, "limits.registers_per_sm");
  require_positive(l.registers_per_block, "limits.registers_per_block");
  require_positive(l.warp_size, "limits.warp_size");
  require_positive(l.smem_granularity, "limits.smem_granularity");
  require_positive(l.register_granularity, "limits.register_granularity");
  require_positive(l.register_partitions, "limits.register_partitions");
  if (l.reserved_smem_per_block < 0)
    throw UserError(fmt::format("occupancy: limits.reserved_smem_per_block: expected a number >= 0, got {}",
                                l.reserved_smem_per_block));
}

// Shared memory one block is allocated: its static and dynamic memory plus the driver's
// reservation, in whole granules.
std::int64_t smem_allocated(const KernelResources& k, const SmLimits& l, std::int64_t dynamic) {
  return round_up(k.static_smem_bytes + dynamic + l.reserved_smem_per_block, l.smem_granularity);
}

int blocks_by_smem(const KernelResources& k, const SmLimits& l, std::int64_t dynamic) {
  if (k.static_smem_bytes + dynamic > l.smem_per_block_optin) return 0;  // the launch fails
  const std::int64_t per_block = smem_allocated(k, l, dynamic);
  return static_cast<int>(std::min<std::int64_t>(INT_MAX, l.smem_per_sm / per_block));
}

// Registers go to warps in units of register_granularity, from per-partition pools; a block
// also must fit the per-block register limit counted as if its warps filled every partition.
int blocks_by_registers(const KernelResources& k, const SmLimits& l) {
  if (k.registers_per_thread == 0) return INT_MAX;
  const int warps = static_cast<int>((k.threads_per_block + l.warp_size - 1) / l.warp_size);
  const std::int64_t per_warp = round_up(std::int64_t{k.registers_per_thread} * l.warp_size, l.register_granularity);
  const std::int64_t assumed = per_warp * round_up(warps, l.register_partitions);
  if (assumed > l.registers_per_block || per_warp * warps > l.registers_per_block) return 0;
  const std::int64_t warps_per_partition = (l.registers_per_sm / l.register_partitions) / per_warp;
  return static_cast<int>(warps_per_partition * l.register_partitions / warps);
}

int blocks_by_threads(const KernelResources& k, const SmLimits& l) {
  const int warps = (k.threads_per_block + l.warp_size - 1) / l.warp_size;
  return (l.max_threads_per_sm / l.warp_size) / warps;
}

Residency residency_with(const KernelResources& k, const SmLimits& l, std::int64_t dynamic) {
  Residency r{l.max_blocks_per_sm, ResidencyLimit::blocks, smem_allocated(k, l, dynamic)};
  const auto tighten = [&r](int blocks, ResidencyLimit why) {
    if (blocks < r.blocks) r = {blocks, why, r.smem_per_block};
  };
  tighten(blocks_by_threads(k, l), ResidencyLimit::threads);
  tighten(blocks_by_registers(k, l), ResidencyLimit::registers);
  tighten(blocks_by_smem(k, l, dynamic), ResidencyLimit::shared_memory);
  return r;
}

}  // namespace

const char* to_string(ResidencyLimit limit) {
  switch (limit) {
    case ResidencyLimit::blocks:
      return "blocks per SM";
    case ResidencyLimit::threads:
      return "threads per SM";
    case ResidencyLimit::registers:
      return "registers";
    case ResidencyLimit::shared_memory:
      return "shared memory";
  }
  return "?";
}

Residency resident_blocks(const KernelResources& kernel, const SmLimits& limits) {
  check_inputs(kernel, limits);
  return residency_with(kernel, limits, kernel.dynamic_smem_bytes);
}

Shaping shape_for_residency(const KernelResources& kernel, const SmLimits& limits, int target_blocks) {
  check_inputs(kernel, limits);
  if (target_blocks < 1)
    throw UserError(fmt::format("occupancy: target residency: expected >= 1 block per SM, got {}", target_blocks));
  Shaping s;
  const Residency natural = residency_with(kernel, limits, kernel.dynamic_smem_bytes);
  s.natural_blocks = natural.blocks;
  s.dynamic_smem = kernel.dynamic_smem_bytes;
  s.blocks = natural.blocks;
  if (natural.blocks == 0) {
    s.reason = fmt::format("the kernel does not fit on an SM at all (limited by {})", to_string(natural.limit));
    return s;
  }
  if (natural.blocks < target_blocks) {
    s.reason = fmt::format(
        "the kernel already fits only {} block(s) per SM (limited by {}); shaping can only "
        "lower residency, not raise it to {}",
        natural.blocks, to_string(natural.limit), target_blocks);
    return s;
  }
  if (natural.blocks == target_blocks) {
    s.ok = true;
    return s;
  }
  // Fewest bytes per block such that target + 1 blocks no longer fit: more than smem/(target+1).
  const std::int64_t allocated = round_up(limits.smem_per_sm / (target_blocks + 1) + 1, limits.smem_granularity);
  const std::int64_t dynamic = allocated - limits.reserved_smem_per_block - kernel.static_smem_bytes;
  if (kernel.static_smem_bytes + dynamic > limits.smem_per_block_optin) {
    s.reason = fmt::format(
        "capping residency at {} needs {} bytes of shared memory per block, over the "
        "per-block maximum of {}",
        target_blocks, kernel.static_smem_bytes + dynamic, limits.smem_per_block_optin);
    return s;
  }
  const Residency shaped = residency_with(kernel, limits, dynamic);
  if (shaped.blocks != target_blocks) {  // granularity leaves no size with exactly `target`
    s.reason = fmt::format("no dynamic shared memory size gives exactly {} blocks per SM ({} bytes give {})",
                           target_blocks, dynamic, shaped.blocks);
    return s;
  }
  s.ok = true;
  s.dynamic_smem = dynamic;
  s.extra_dynamic_smem = dynamic - kernel.dynamic_smem_bytes;
  s.blocks = shaped.blocks;
  return s;
}

}  // namespace syncopate::runtime
