// Occupancy shaping arithmetic (occupancy.hpp) with H100/H200 limits: 228 KiB shared memory
// per SM, 227 KiB per block opt-in, 1 KiB reserved per block, 32 blocks, 2048 threads and
// 64 Ki registers per SM. Where NVIDIA's cuda_occupancy.h is installed, resident_blocks is
// also compared with it over a grid of kernels.
#include <string>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/runtime/occupancy.hpp"

#if __has_include(<cuda_occupancy.h>)
#include <cuda_occupancy.h>
#define SY_HAVE_CUDA_OCCUPANCY 1
#endif

namespace syncopate::runtime {
namespace {

SmLimits hopper() {
  SmLimits l;
  l.smem_per_sm = 228 * 1024;
  l.smem_per_block_optin = 227 * 1024;
  l.reserved_smem_per_block = 1024;
  l.max_blocks_per_sm = 32;
  l.max_threads_per_sm = 2048;
  l.registers_per_sm = 65536;
  l.registers_per_block = 65536;
  return l;
}

KernelResources kernel(int threads, int regs, std::int64_t dynamic, std::int64_t static_smem = 0) {
  return {threads, regs, static_smem, dynamic};
}

TEST(Occupancy, BigGemmTileFitsOncePerSm) {
  // 128x256 tile, 3 stages of (128+256)x64 bf16 plus half a C tile: 176 KiB, 8 warps.
  const auto r = resident_blocks(kernel(256, 128, 180224), hopper());
  EXPECT_EQ(r.blocks, 1);
  EXPECT_EQ(r.limit, ResidencyLimit::shared_memory);
  EXPECT_EQ(r.smem_per_block, 180224 + 1024);
}

TEST(Occupancy, SmallGemmTileShapedFromTwoToOneBlock) {
  // 64x128 tile, 4 stages: 112 KiB; two fit in 228 KiB (with 1 KiB reserved each).
  const auto k = kernel(128, 128, 114688);
  ASSERT_EQ(resident_blocks(k, hopper()).blocks, 2);
  const auto s = shape_for_residency(k, hopper(), 1);
  ASSERT_TRUE(s.ok) << s.reason;
  EXPECT_EQ(s.natural_blocks, 2);
  EXPECT_EQ(s.blocks, 1);
  // Least size: more than 228 KiB / 2 per block, in 128-byte granules, minus the reservation.
  EXPECT_EQ(s.dynamic_smem, 116864 - 1024);
  EXPECT_EQ(s.extra_dynamic_smem, 116864 - 1024 - 114688);
  auto padded = k;
  padded.dynamic_smem_bytes = s.dynamic_smem;
  EXPECT_EQ(resident_blocks(padded, hopper()).blocks, 1);
  padded.dynamic_smem_bytes -= 128;  // one granule less lets the second block back in
  EXPECT_EQ(resident_blocks(padded, hopper()).blocks, 2);
}

TEST(Occupancy, LimitsAreNamed) {
  EXPECT_EQ(resident_blocks(kernel(256, 32, 0), hopper()).limit, ResidencyLimit::threads);  // 8 blocks
  EXPECT_EQ(resident_blocks(kernel(256, 32, 0), hopper()).blocks, 8);
  EXPECT_EQ(resident_blocks(kernel(256, 128, 0), hopper()).limit, ResidencyLimit::registers);  // 2 blocks
  EXPECT_EQ(resident_blocks(kernel(256, 128, 0), hopper()).blocks, 2);
  EXPECT_EQ(resident_blocks(kernel(32, 16, 0), hopper()).limit, ResidencyLimit::blocks);
  EXPECT_EQ(resident_blocks(kernel(32, 16, 0), hopper()).blocks, 32);
  // Over the opt-in maximum: cannot launch at all.
  EXPECT_EQ(resident_blocks(kernel(128, 32, 227 * 1024 + 1), hopper()).blocks, 0);
}

TEST(Occupancy, EveryTargetBelowNaturalIsReachedWithLessPaddingForMoreBlocks) {
  for (int threads : {64, 128, 256, 384}) {
    for (int regs : {16, 32, 40, 64}) {
      for (std::int64_t dynamic : {0, 4096, 16384, 40000}) {
        const auto k = kernel(threads, regs, dynamic);
        const int natural = resident_blocks(k, hopper()).blocks;
        std::int64_t previous_extra = -1;
        for (int target = natural; target >= 1; --target) {
          const auto s = shape_for_residency(k, hopper(), target);
          ASSERT_TRUE(s.ok) << threads << " threads, " << regs << " regs, " << dynamic << " B, target " << target
                            << ": " << s.reason;
          auto padded = k;
          padded.dynamic_smem_bytes = s.dynamic_smem;
          EXPECT_EQ(resident_blocks(padded, hopper()).blocks, target);
          EXPECT_GE(s.extra_dynamic_smem, previous_extra);  // fewer blocks need more memory
          previous_extra = s.extra_dynamic_smem;
        }
      }
    }
  }
}

TEST(Occupancy, TargetAtNaturalNeedsNothing) {
  const auto s = shape_for_residency(kernel(256, 128, 180224), hopper(), 1);
  EXPECT_TRUE(s.ok);
  EXPECT_EQ(s.extra_dynamic_smem, 0);
  EXPECT_EQ(s.blocks, 1);
}

TEST(Occupancy, CannotRaiseResidency) {
  const auto s = shape_for_residency(kernel(256, 128, 180224), hopper(), 2);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.natural_blocks, 1);
  EXPECT_NE(s.reason.find("already fits only 1 block(s) per SM (limited by shared memory)"), std::string::npos)
      << s.reason;
}

TEST(Occupancy, PaddingOverTheOptInMaximumIsRefused) {
  SmLimits small = hopper();  // a GPU whose blocks may use at most 48 KiB of 100 KiB
  small.smem_per_sm = 100 * 1024;
  small.smem_per_block_optin = 48 * 1024;
  const auto s = shape_for_residency(kernel(128, 32, 0), small, 1);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("over the per-block maximum of 49152"), std::string::npos) << s.reason;
}

TEST(Occupancy, BadInputNamesTheField) {
  try {
    shape_for_residency(kernel(256, 32, 0), hopper(), 0);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("target residency: expected >= 1"), std::string::npos) << e.what();
  }
  try {
    resident_blocks(kernel(0, 32, 0), hopper());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel.threads_per_block: expected a number > 0, got 0"), std::string::npos)
        << e.what();
  }
  SmLimits bad = hopper();
  bad.smem_per_sm = 0;
  EXPECT_THROW(resident_blocks(kernel(128, 32, 0), bad), UserError);
}

#ifdef SY_HAVE_CUDA_OCCUPANCY
// NVIDIA's calculator for compute capability 9.0 with the same limits, default carveout.
int reference_blocks(const KernelResources& k, const SmLimits& l) {
  cudaOccDeviceProp p;
  p.computeMajor = 9;
  p.computeMinor = 0;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = l.max_threads_per_sm;
  p.regsPerBlock = l.registers_per_block;
  p.regsPerMultiprocessor = l.registers_per_sm;
  p.warpSize = l.warp_size;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = static_cast<size_t>(l.smem_per_sm);
  p.numSms = 132;
  p.sharedMemPerBlockOptin = static_cast<size_t>(l.smem_per_block_optin);
  p.reservedSharedMemPerBlock = static_cast<size_t>(l.reserved_smem_per_block);
  cudaOccFuncAttributes a;
  a.maxThreadsPerBlock = 1024;
  a.numRegs = k.registers_per_thread;
  a.sharedSizeBytes = static_cast<size_t>(k.static_smem_bytes);
  a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  a.maxDynamicSharedSizeBytes = static_cast<size_t>(l.smem_per_block_optin - k.static_smem_bytes);
  cudaOccDeviceState state;
  cudaOccResult result;
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &p, &a, &state, k.threads_per_block,
                                              static_cast<size_t>(k.dynamic_smem_bytes)) != CUDA_OCC_SUCCESS)
    return -1;
  return result.activeBlocksPerMultiprocessor;
}

TEST(Occupancy, AgreesWithNvidiasCalculator) {
  int compared = 0;
  for (int threads : {32, 96, 128, 256, 384, 512, 1024}) {
    for (int regs : {0, 16, 24, 32, 40, 64, 96, 128, 168, 255}) {
      for (std::int64_t dynamic : {0, 1000, 8192, 50000, 114688, 116000, 180224, 232448}) {
        for (std::int64_t static_smem : {0, 2048}) {
          const auto k = kernel(threads, regs, dynamic, static_smem);
          EXPECT_EQ(resident_blocks(k, hopper()).blocks, reference_blocks(k, hopper()))
              << threads << " threads, " << regs << " regs, " << static_smem << " + " << dynamic << " B";
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 7 * 10 * 8 * 2);
}
#endif

}  // namespace
}  // namespace syncopate::runtime
