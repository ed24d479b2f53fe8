// The m_local_shard keyword of @sy.consume / @sy.produce (a tensor that holds only this rank's
// shard of the tile rows, e.g. the staging tensor of a staged GEMM+RS): carried into the access,
// the kernel's __syncopate__ dict and describe_json; bad values and a missing m= are refused.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

std::string kernel(const std::string& consume) {
  return "import triton\n"                                             // 1
         "import triton.language as tl\n"                              // 2
         "@triton.jit\n"                                               // 3
         "def k(c_ptr, p_ptr, N):\n"                                   // 4
         "    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_n)\n"  // 5
         "    pid_m = tl.program_id(0) // N\n"                         // 6
         "    pid_n = tl.program_id(0) % N\n"                          // 7
         "    # @sy.end\n"                                             // 8
         "    " +
         consume +
         "\n"                                                              // 9
         "    x = tl.load(p_ptr + pid_m)\n"                                // 10
         "    # @sy.produce(c_ptr, m=pid_m, n=pid_n, m_dim=1, n_dim=2)\n"  // 11
         "    tl.store(c_ptr + pid_m, x)\n";                               // 12
}

std::string error_of(const std::string& src) {
  try {
    transform_kernel(src, "k.py", "k");
  } catch (const TransformError& e) {
    return e.what();
  }
  return "no error";
}

TEST(StagedAnnotation, ShardFlagReachesTheAccessTheDictAndTheJson) {
  for (const std::string value : {"True", "1"}) {
    const auto r = transform_kernel(
        kernel("# @sy.consume(p_ptr, m=pid_m, n=pid_n, m_dim=1, n_dim=2, m_local_shard=" + value + ")"), "k.py", "k");
    ASSERT_EQ(r.accesses.size(), 2u);
    EXPECT_EQ(r.accesses[0].access.tensor, "p");
    EXPECT_EQ(r.accesses[0].access.m_dim, 1);
    EXPECT_EQ(r.accesses[0].access.n_dim, 2);
    EXPECT_TRUE(r.accesses[0].access.m_local_shard) << value;
    EXPECT_FALSE(r.accesses[1].access.m_local_shard);
    EXPECT_NE(r.source.find("{\"tensor\": \"p\", \"param\": \"p_ptr\", \"role\": \"consume\", \"m_dim\": 1, "
                            "\"n_dim\": 2, \"m_local_shard\": True}"),
              std::string::npos)
        << r.source;
    // The produce access has no key: kernels without the flag describe themselves as before.
    EXPECT_NE(r.source.find("\"role\": \"produce\", \"m_dim\": 1, \"n_dim\": 2}"), std::string::npos) << r.source;
    const auto j = nlohmann::json::parse(describe_json(r));
    EXPECT_EQ(j.at("accesses")[0].at("m_local_shard"), true);
    EXPECT_FALSE(j.at("accesses")[1].contains("m_local_shard"));
  }
}

TEST(StagedAnnotation, FalseOrZeroLeavesTheFlagOff) {
  for (const std::string value : {"False", "0"}) {
    const auto r = transform_kernel(
        kernel("# @sy.consume(p_ptr, m=pid_m, n=pid_n, m_dim=1, n_dim=2, m_local_shard=" + value + ")"), "k.py", "k");
    EXPECT_FALSE(r.accesses[0].access.m_local_shard) << value;
    EXPECT_EQ(r.source.find("\"m_local_shard\""), std::string::npos) << r.source;
  }
}

TEST(StagedAnnotation, BadValueIsRefusedAtItsColumn) {
  const auto msg = error_of(kernel("# @sy.consume(p_ptr, m=pid_m, m_local_shard=2)"));
  EXPECT_NE(msg.find("k.py:9:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'m_local_shard=' must be True, False, 1 or 0, got '2'"), std::string::npos) << msg;
}

TEST(StagedAnnotation, ShardWithoutRowsIsRefused) {
  const auto msg = error_of(kernel("# @sy.consume(p_ptr, n=pid_n, n_dim=2, m_local_shard=True)"));
  EXPECT_NE(msg.find("k.py:9:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'m_local_shard=' needs 'm='"), std::string::npos) << msg;
}

}  // namespace
}  // namespace syncopate::transform
