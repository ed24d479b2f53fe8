// Single-process multi-GPU runtime tests: every template plan on every backend (NCCL plans issue
// each step's send and recv as one NCCL group), epochs with no reset, 200 back-to-back calls, a
// chunk that goes missing on purpose, and an NCCL peer that never posts its send.
//
// World size: SYNCOPATE_TEST_WORLD (default: the number of visible GPUs, at least 2). Ranks
// beyond the GPU count share GPUs (rank r on GPU r % count); nccl cases then skip, since NCCL
// needs one GPU per rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "local_group.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/runtime/rank_schedule.hpp"

namespace syncopate::gpu_test {
namespace {

using plan::Algorithm;
using plan::Backend;
using plan::Collective;

// SYNCOPATE_TEST_NORMAL_PRIORITY=1 runs the plan's streams at normal priority (an experiment
// on head-of-line blocking between ranks that share a GPU).
runtime::ExecutorOptions test_options() {
  runtime::ExecutorOptions o;
  const char* env = std::getenv("SYNCOPATE_TEST_NORMAL_PRIORITY");
  o.high_priority_streams = !(env != nullptr && std::string(env) == "1");
  // SYNCOPATE_TEST_NO_MEMOPS=1: raise slots with kernels instead of stream memory operations.
  const char* memops = std::getenv("SYNCOPATE_TEST_NO_MEMOPS");
  o.stream_memops = !(memops != nullptr && std::string(memops) == "1");
  return o;
}

int test_world() {
  if (const char* env = std::getenv("SYNCOPATE_TEST_WORLD")) return std::atoi(env);
  return std::max(2, device_count());
}

// Integer-valued inputs: sums of a few of them are exact in f32 whatever the order.
float input_value(int rank, std::int64_t epoch, std::int64_t k) {
  return static_cast<float>(((rank + 1) * 7919 + k * 31 + epoch * 17) % 97) - 48.0f;
}

std::vector<float> inputs(int rank, std::int64_t epoch, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) v[k] = input_value(rank, epoch, k);
  return v;
}

// Index along `dim` of flat element k of a row-major 2-D tensor.
std::int64_t along(const std::vector<std::int64_t>& shape, int dim, std::int64_t k) {
  return dim == 0 ? k / shape[1] : k % shape[1];
}

int owner(std::int64_t i, std::int64_t size, int world) {
  for (int r = 0; r < world; ++r) {
    const auto s = plan::even_split(size, world, r);
    if (i >= s.begin && i < s.begin + s.size) return r;
  }
  return -1;
}

// Checks rank q's result for call `epoch`; returns the number of wrong elements (reports a few).
int check_result(LocalGroup& g, const plan::CommPlan& p, int q, std::int64_t epoch) {
  const auto& spec = p.tensors.at(p.collective.tensor);
  const auto& shape = spec.shape;
  const int dim = p.collective.dim;
  const int w = p.world_size;
  const std::int64_t n = spec.elements();
  const bool a2a = p.collective.kind == Collective::all_to_all;
  const auto out = g.read(q, a2a ? p.collective.output : p.collective.tensor);
  int wrong = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t i = along(shape, dim, k);
    const int s = owner(i, shape[dim], w);
    float want = 0;
    bool checked = true;
    switch (p.collective.kind) {
      case Collective::all_gather: want = input_value(s, epoch, k); break;
      case Collective::reduce_scatter:
        checked = s == q;
        for (int r = 0; r < w; ++r) want += input_value(r, epoch, k);
        break;
      case Collective::all_reduce:
        for (int r = 0; r < w; ++r) want += input_value(r, epoch, k);
        break;
      case Collective::all_to_all: {
        // y_q block s came from x_s block q, same position inside the block.
        const std::int64_t block = shape[dim] / w;
        const std::int64_t src_i = q * block + (i - s * block);
        const std::int64_t src_k = dim == 0 ? src_i * shape[1] + k % shape[1] : (k / shape[1]) * shape[1] + src_i;
        want = input_value(s, epoch, src_k);
        break;
      }
      default: checked = false;
    }
    if (checked && out[k] != want) {
      if (wrong < 5)
        ADD_FAILURE() << fmt::format("rank {}, epoch {}, element {}: got {}, want {}", q, epoch, k, out[k], want);
      ++wrong;
    }
  }
  return wrong;
}

struct Case {
  Collective collective;
  Algorithm algorithm;
  Backend backend;
  int split;
  int dim;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string s = fmt::format("{}_{}_{}_split{}_dim{}", plan::to_string(info.param.collective),
                              plan::to_string(info.param.algorithm), plan::to_string(info.param.backend),
                              info.param.split, info.param.dim);
  for (auto& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

plan::CommPlan make_case_plan(const Case& c, int world) {
  plan::TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = c.algorithm;
  o.world_size = world;
  o.split = c.split;
  o.dtype = plan::DType::f32;
  o.dim = c.dim;
  o.backend = c.backend;
  const std::int64_t split_dim = c.collective == Collective::all_to_all ? 3 * world * c.split
                                                                        : 3 * world * c.split + 1;
  o.shape = c.dim == 0 ? std::vector<std::int64_t>{split_dim, 37} : std::vector<std::int64_t>{7, split_dim};
  auto p = plan::make_plan(o);
  plan::verify_or_throw(p, case_name({c, 0}));
  return p;
}

bool skip_nccl(const Case& c, int world) { return c.backend == Backend::nccl && world > device_count(); }

class TemplatePlans : public testing::TestWithParam<Case> {};

TEST_P(TemplatePlans, EveryRankGetsTheCollectiveResultForThreeEpochs) {
  const int world = test_world();
  if (skip_nccl(GetParam(), world)) GTEST_SKIP() << "nccl needs one GPU per rank";
  const auto p = make_case_plan(GetParam(), world);
  LocalGroup g(p, test_options());
  const auto n = p.tensors.at(p.collective.tensor).elements();
  for (std::int64_t epoch = 1; epoch <= 3; ++epoch) {
    std::vector<const float*> staged;
    for (int r = 0; r < world; ++r) staged.push_back(g.upload(r, inputs(r, epoch, n)));
    g.on_every_rank([&](int r) {
      auto& ex = g.executor(r);
      ex.begin(g.stream(r), epoch);
      ASSERT_EQ(cudaMemcpyAsync(ex.tensor(r, p.collective.tensor), staged[r], n * sizeof(float),
                                cudaMemcpyDeviceToDevice, g.stream(r)), cudaSuccess);
      ex.issue(g.stream(r), epoch);
      ex.end(g.stream(r), epoch);
      ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    });
    g.monitor().check();
    for (int q = 0; q < world; ++q) ASSERT_EQ(check_result(g, p, q, epoch), 0) << "rank " << q;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
    for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce,
                      Collective::all_to_all})
      for (auto alg : {Algorithm::ring, Algorithm::direct, Algorithm::bidir}) {
        out.push_back({coll, alg, backend, 1, 0});
        out.push_back({coll, alg, backend, 2, 1});
      }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, TemplatePlans, testing::ValuesIn(all_cases()), case_name);

// 200 calls with no reset and no host synchronisation between them: epochs keep signals apart.
class BackToBack : public testing::TestWithParam<Case> {};

TEST_P(BackToBack, TwoHundredCallsStayCorrect) {
  const int world = test_world();
  if (skip_nccl(GetParam(), world)) GTEST_SKIP() << "nccl needs one GPU per rank";
  const auto p = make_case_plan(GetParam(), world);
  LocalGroup g(p, test_options());
  const auto n = p.tensors.at(p.collective.tensor).elements();
  constexpr std::int64_t kCalls = 200;
  // Inputs of odd and even calls, kept on the device so the loop never waits for the host.
  std::vector<std::vector<const float*>> sets_of(world);
  for (int r = 0; r < world; ++r)
    for (int parity = 0; parity < 2; ++parity) sets_of[r].push_back(g.upload(r, inputs(r, kCalls - 1 + parity, n)));
  g.on_every_rank([&](int r) {
    auto& ex = g.executor(r);
    const auto& sets = sets_of[r];
    for (std::int64_t epoch = 1; epoch <= kCalls; ++epoch) {
      ex.begin(g.stream(r), epoch);
      ASSERT_EQ(cudaMemcpyAsync(ex.tensor(r, p.collective.tensor), sets[epoch == kCalls ? 1 : epoch % 2],
                                n * sizeof(float), cudaMemcpyDeviceToDevice, g.stream(r)), cudaSuccess);
      ex.issue(g.stream(r), epoch);
      ex.end(g.stream(r), epoch);
    }
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
  });
  g.monitor().check();
  for (int q = 0; q < world; ++q) ASSERT_EQ(check_result(g, p, q, kCalls), 0) << "rank " << q;
}

std::vector<Case> back_to_back_cases() {
  std::vector<Case> out;
  for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
    out.push_back({Collective::all_gather, Algorithm::ring, backend, 2, 0});
    out.push_back({Collective::all_reduce, Algorithm::direct, backend, 1, 0});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackToBack, testing::ValuesIn(back_to_back_cases()), case_name);

// A chunk that never moves must end in a WaitTimeoutError naming it, not in a hang.
class MissingChunk : public testing::TestWithParam<Case> {};

TEST_P(MissingChunk, TimesOutNamingTheChunk) {
  const int world = test_world();
  if (world < 2) GTEST_SKIP() << "a chunk needs two ranks";
  if (skip_nccl(GetParam(), world)) GTEST_SKIP() << "nccl needs one GPU per rank";
  const auto p = make_case_plan(GetParam(), world);
  int dropped = -1;
  for (const auto& c : p.chunks)
    if (c.dst == 1 && c.src != c.dst) {
      dropped = c.id;
      break;
    }
  ASSERT_GE(dropped, 0);
  runtime::ExecutorOptions options = test_options();
  options.wait_bound_ns = 300'000'000;  // 0.3 s
  options.drop_chunk = dropped;
  LocalGroup g(p, options);
  g.on_every_rank([&](int r) {
    g.executor(r).run(g.stream(r), 1);
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
  });
  try {
    g.monitor().check();
    FAIL() << "no WaitTimeoutError although chunk " << dropped << " never moved";
  } catch (const WaitTimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("(chunk {})", dropped)), std::string::npos) << msg;
    EXPECT_NE(msg.find("landing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected >= 1, seen 0"), std::string::npos) << msg;
    std::printf("missing-chunk error as raised: %s\n", msg.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, MissingChunk,
                         testing::Values(Case{Collective::all_gather, Algorithm::direct, Backend::copy_engine, 1, 0},
                                         Case{Collective::all_gather, Algorithm::direct, Backend::sm_copy, 1, 0},
                                         Case{Collective::all_gather, Algorithm::direct, Backend::nccl, 1, 0}),
                         case_name);

// An NCCL recv whose peer never posts the send hangs inside NCCL's kernel, where no bounded
// wait runs. Rank 0 skips its send of one chunk; rank 1 still posts the matching recv. Without
// the landing wait on the caller's stream (issue(..., false)), only the executor's NCCL watchdog
// can end it: after the bound it aborts rank 1's communicator, the streams drain, and
// monitor.check() raises WaitTimeoutError for that chunk, with kind nccl and the peer as owner.
TEST(NcclBoundedWait, nccl_PeerThatNeverSendsIsAbortedAfterTheBound) {
  const int world = test_world();
  if (world < 2 || world > device_count()) GTEST_SKIP() << "nccl needs two ranks with one GPU each";
  const auto p = make_case_plan(Case{Collective::all_gather, Algorithm::ring, Backend::nccl, 1, 0}, world);
  int dropped = -1;
  for (const auto& c : p.chunks)
    if (c.src == 0 && c.dst == 1) {
      dropped = c.id;
      break;
    }
  ASSERT_GE(dropped, 0);
  runtime::ExecutorOptions options = test_options();
  options.wait_bound_ns = 300'000'000;  // 0.3 s
  options.drop_chunk = dropped;
  options.drop_on_rank = 0;  // rank 1 still posts its recv
  LocalGroup g(p, options);
  const auto start = std::chrono::steady_clock::now();
  g.on_every_rank([&](int r) {
    auto& ex = g.executor(r);
    ex.begin(g.stream(r), 1);
    ex.issue(g.stream(r), 1, /*wait_landed=*/false);
    ex.end(g.stream(r), 1);
    // Poll rather than synchronise: if the abort failed to end NCCL's kernel, report it and
    // stop the process instead of hanging the GPU job.
    while (cudaStreamQuery(g.stream(r)) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
        std::fprintf(stderr, "FATAL: rank %d's stream is still busy 30 s after a 0.3 s bound: the NCCL "
                     "watchdog did not end the hung recv\n", r);
        std::fflush(stderr);
        std::_Exit(3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
  const runtime::WaitRecord record = g.monitor().snapshot();
  EXPECT_EQ(record.flag, 1);
  EXPECT_EQ(record.kind, static_cast<int>(runtime::WaitKind::nccl));
  EXPECT_EQ(record.rank, 1);
  EXPECT_EQ(record.owner, 0);  // the peer that never sent
  EXPECT_EQ(record.chunk, dropped);
  try {
    g.monitor().check();
    FAIL() << "no WaitTimeoutError although rank 0 never sent chunk " << dropped;
  } catch (const WaitTimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("(chunk {})", dropped)), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    std::printf("NCCL timeout as raised after %.2f s: %s\n", seconds, msg.c_str());
  }
  // The aborted communicator refuses further calls instead of hanging in them.
  EXPECT_THROW(g.executor(1).run(g.stream(1), 2), DeviceError);
}

}  // namespace
}  // namespace syncopate::gpu_test
