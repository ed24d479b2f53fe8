// Single-process multi-GPU runtime tests: every template plan on every backend (NCCL plans issue
// each step's send and recv as one NCCL group), epochs with no reset, 200 back-to-back calls, a
// chunk that goes missing on purpose, an NCCL peer that never posts its send, reduce-adds in
// bf16/f16 over uneven and odd-width boxes (plain and atomic adds), and the reduce-add
// bandwidth per backend (printed, never asserted).
//
// World size: SYNCOPATE_TEST_WORLD (default: the number of visible GPUs, at least 2). Ranks
// beyond the GPU count share GPUs (rank r on GPU r % count); nccl cases then skip, since NCCL
// needs one GPU per rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>
#include <thread>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include "local_group.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/runtime/device_ops.hpp"
#include "syncopate/runtime/graph_launch.hpp"
#include "syncopate/runtime/host_flag.hpp"
#include "syncopate/runtime/wait_monitor.hpp"
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
  return o;
}

int test_world() {
  if (const char* env = std::getenv("SYNCOPATE_TEST_WORLD")) return std::atoi(env);
  return std::max(2, device_count());
}

// One call of rank r inside on_every_rank(), ordered for ranks that share a GPU
// (docs/RUNTIME.md, "Ranks sharing a GPU"): begin, copy `bytes` of `input` into the collective's
// tensor (if any), publish the entry counter, then a host barrier so that every rank's entry
// write is enqueued before any rank enqueues a wait for it; fork the chunk steps, end, and a
// second barrier so every exit write is enqueued before the next call's begin waits for it.
void ordered_call(LocalGroup& g, int r, const void* input = nullptr, std::size_t bytes = 0, bool wait_landed = true) {
  auto& ex = g.executor(r);
  ex.begin(g.stream(r));
  if (input != nullptr)
    EXPECT_EQ(
        cudaMemcpyAsync(ex.tensor(r, ex.plan().collective.tensor), input, bytes, cudaMemcpyDeviceToDevice, g.stream(r)),
        cudaSuccess);
  ex.publish(g.stream(r));
  g.barrier();
  ex.fork(g.stream(r));
  ex.issue_chunks();
  if (wait_landed) ex.wait_landed(g.stream(r));
  ex.end(g.stream(r));
  g.barrier();
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
      case Collective::all_gather:
        want = input_value(s, epoch, k);
        break;
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
      default:
        checked = false;
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

// The template options every parameterised case shares; each case picks its own shape.
plan::TemplateOptions case_options(Collective collective, Algorithm algorithm, Backend backend, plan::DType dtype,
                                   int split, int dim, int world) {
  plan::TemplateOptions o;
  o.collective = collective;
  o.algorithm = algorithm;
  o.world_size = world;
  o.split = split;
  o.dtype = dtype;
  o.dim = dim;
  o.backend = backend;
  return o;
}

plan::CommPlan make_case_plan(const Case& c, int world) {
  auto o = case_options(c.collective, c.algorithm, c.backend, plan::DType::f32, c.split, c.dim, world);
  const std::int64_t split_dim = c.collective == Collective::all_to_all ? 3 * world * c.split : 3 * world * c.split + 1;
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
      ordered_call(g, r, staged[r], n * sizeof(float));
      ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    });
    g.monitor().check();
    for (int q = 0; q < world; ++q) ASSERT_EQ(check_result(g, p, q, epoch), 0) << "rank " << q;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
    for (auto coll :
         {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
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
    const auto& sets = sets_of[r];
    for (std::int64_t epoch = 1; epoch <= kCalls; ++epoch)
      ordered_call(g, r, sets[epoch == kCalls ? 1 : epoch % 2], n * sizeof(float));
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

// begin_and_publish (one kernel: the epoch advance, the wait for the peers' exit counters, the
// entry raise) in place of begin + publish, for 100 calls after a first call that put the inputs
// in place (an all-gather leaves its own rows as they are, so the result stays call 1's): every
// peer's waits on this rank's entry counter and landing slots must hold each call (else the
// monitor reports a timeout), and the epoch word must have advanced once per call.
class OneKernelStart : public testing::TestWithParam<Case> {};

TEST_P(OneKernelStart, HundredCallsMatchBeginThenPublish) {
  const int world = test_world();
  if (skip_nccl(GetParam(), world)) GTEST_SKIP() << "nccl needs one GPU per rank";
  const auto p = make_case_plan(GetParam(), world);
  LocalGroup g(p, test_options());
  const auto n = p.tensors.at(p.collective.tensor).elements();
  constexpr std::int32_t kCalls = 101;
  std::vector<const float*> staged;
  for (int r = 0; r < world; ++r) staged.push_back(g.upload(r, inputs(r, 1, n)));
  std::vector<std::int32_t> epochs(world, -1);
  g.on_every_rank([&](int r) {
    auto& ex = g.executor(r);
    ordered_call(g, r, staged[r], n * sizeof(float));
    for (std::int32_t call = 2; call <= kCalls; ++call) {
      ex.begin_and_publish(g.stream(r));
      g.barrier();  // every entry raise enqueued before any rank's waits for it (shared GPUs)
      ex.fork(g.stream(r));
      ex.issue_chunks();
      ex.wait_landed(g.stream(r));
      ex.end(g.stream(r));
      g.barrier();
    }
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&epochs[r], ex.epoch_word(), sizeof(std::int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  });
  g.monitor().check();
  for (int q = 0; q < world; ++q) {
    EXPECT_EQ(epochs[q], kCalls) << "rank " << q;
    ASSERT_EQ(check_result(g, p, q, 1), 0) << "rank " << q;
  }
}

std::vector<Case> one_kernel_start_cases() {
  std::vector<Case> out;
  for (auto backend : {Backend::copy_engine, Backend::sm_copy}) {
    out.push_back({Collective::all_gather, Algorithm::ring, backend, 2, 0});
    out.push_back({Collective::all_gather, Algorithm::direct, backend, 1, 1});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(CopyBackends, OneKernelStart, testing::ValuesIn(one_kernel_start_cases()), case_name);

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
    ordered_call(g, r);
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
// The ops end each call by copying the fused kernel's timeout flag into a HostFlag, eagerly or
// inside a captured graph; the host reads it at the next call without synchronizing.
TEST(HostFlagCopy, EagerAndCapturedCopiesReachTheHost) {
  int64_t* word = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&word), sizeof(int64_t)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  runtime::HostFlag flag;
  EXPECT_EQ(flag.value(), 0);
  const int64_t first = 7;
  ASSERT_EQ(cudaMemcpyAsync(word, &first, sizeof first, cudaMemcpyHostToDevice, stream), cudaSuccess);
  flag.enqueue_copy(word, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(flag.value(), 7);
  flag.clear();
  EXPECT_EQ(flag.value(), 0);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  flag.enqueue_copy(word, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(flag.value(), 0);  // captured, not run
  for (int64_t v : {int64_t{1}, int64_t{0}, int64_t{42}}) {
    ASSERT_EQ(cudaMemcpy(word, &v, sizeof v, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(flag.value(), v) << "replay copying " << v;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(word);
}

// The ops' fast path replays a call's graph through replay_graph_unless: it must launch only when
// the stream is not being captured and neither the runtime's record nor the kernel's host flag
// shows an earlier timeout, and launch nothing otherwise (the caller then takes the full path).
TEST(GuardedReplay, LaunchesOnlyWhenNotCapturedAndNothingTimedOut) {
  using runtime::ReplayOutcome;
  int* word = nullptr;
  int64_t* flag_word = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&word), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&flag_word), sizeof(int64_t)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(word, 1, sizeof(int), stream), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const auto handle = reinterpret_cast<std::uintptr_t>(exec);
  auto word_value = [&] {
    int v = -1;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&v, word, sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  };
  auto reset = [&] { ASSERT_EQ(cudaMemset(word, 0, sizeof(int)), cudaSuccess); };
  runtime::WaitMonitor monitor;
  runtime::HostFlag flag;

  reset();
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, &monitor, &flag), ReplayOutcome::launched);
  EXPECT_EQ(word_value(), 0x01010101) << "the clear case must launch the graph";
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, nullptr, nullptr), ReplayOutcome::launched);

  // The kernel's flag, copied to the host by an earlier call: nothing launched.
  reset();
  const int64_t timed_out = 1;
  ASSERT_EQ(cudaMemcpy(flag_word, &timed_out, sizeof timed_out, cudaMemcpyHostToDevice), cudaSuccess);
  flag.enqueue_copy(flag_word, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, &monitor, &flag), ReplayOutcome::timed_out);
  EXPECT_EQ(word_value(), 0);
  flag.clear();

  // The runtime's record (mapped host memory the wait kernels write): nothing launched.
  runtime::WaitRecord record;
  record.flag = 1;
  ASSERT_EQ(cudaMemcpy(monitor.device_record(), &record, sizeof record, cudaMemcpyDefault), cudaSuccess);
  EXPECT_TRUE(monitor.timed_out());
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, &monitor, &flag), ReplayOutcome::timed_out);
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, nullptr, &flag), ReplayOutcome::launched)
      << "an unwatched monitor is not looked at";
  EXPECT_EQ(word_value(), 0x01010101);
  monitor.clear();
  EXPECT_FALSE(monitor.timed_out());

  // Under the caller's capture: nothing launched, nothing recorded.
  reset();
  cudaGraph_t user = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(runtime::replay_graph_unless(handle, stream, &monitor, &flag), ReplayOutcome::capturing);
  ASSERT_EQ(cudaStreamEndCapture(stream, &user), cudaSuccess);
  size_t nodes = 99;
  ASSERT_EQ(cudaGraphGetNodes(user, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 0u);
  EXPECT_EQ(word_value(), 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  cudaGraphDestroy(user);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(flag_word);
  cudaFree(word);
}

// A call captured as two graphs (ops/call_graphs.py, "Split graphs"), in miniature: the head
// advances the epoch, records an external event, then waits (bounded) for a slot that only the
// tail raises to the epoch's value, as a fused kernel waits for its chunks; the tail waits for
// that event, raises the slot, then a second word. launch_split_graph must let the tail run
// beside the head (a tail queued behind the whole head would leave the head's wait to time out)
// and after the head's start (a tail before the epoch advance raises the slot to the old epoch:
// the head's wait times out too), and the caller's stream must wait for the tail (the second
// word is current after synchronizing that stream alone), with the done event recorded by the
// host or by the tail itself (tail_records_done: an external event record as its last node).
// 50 replays each: the epoch on the device makes each right.
class SplitGraph : public testing::TestWithParam<bool> {};

TEST_P(SplitGraph, TailRunsBesideTheHeadAfterItsStartAndTheStreamWaitsForIt) {
  const bool tail_records_done = GetParam();
  constexpr int kReplays = 50;
  std::int32_t* words = nullptr;  // epoch, slot, after
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&words), 3 * sizeof(std::int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(words, 0, 3 * sizeof(std::int32_t)), cudaSuccess);
  std::int32_t* epoch = words;
  std::int32_t* slot = words + 1;
  std::int32_t* after = words + 2;
  runtime::warm_up_kernels();
  runtime::WaitMonitor monitor;
  cudaStream_t stream = nullptr, side = nullptr, capture = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t started = nullptr, done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&started, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);

  runtime::WaitBatch batch;
  batch.count = 1;
  batch.bound_ns = 200'000'000;  // 0.2 s
  batch.epoch = epoch;
  batch.conditions[0].addr = slot;
  batch.conditions[0].chunk = 0;
  cudaGraph_t head = nullptr, tail = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  runtime::launch_epoch_advance(capture, epoch);
  ASSERT_EQ(cudaEventRecordWithFlags(started, capture, cudaEventRecordExternal), cudaSuccess);
  runtime::launch_bounded_wait(capture, batch, monitor.device_record());
  ASSERT_EQ(cudaStreamEndCapture(capture, &head), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(capture, started, cudaEventWaitExternal), cudaSuccess);
  runtime::launch_signal_raise(capture, slot, epoch);
  runtime::launch_signal_raise(capture, after, epoch);
  if (tail_records_done) ASSERT_EQ(cudaEventRecordWithFlags(done, capture, cudaEventRecordExternal), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(capture, &tail), cudaSuccess);
  cudaGraphExec_t head_exec = nullptr, tail_exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&head_exec, head, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&tail_exec, tail, 0), cudaSuccess);

  for (int call = 1; call <= kReplays; ++call) {
    EXPECT_EQ(runtime::replay_split_graph_unless(reinterpret_cast<std::uintptr_t>(head_exec),
                                                 reinterpret_cast<std::uintptr_t>(tail_exec), side, done,
                                                 tail_records_done, stream, &monitor, nullptr),
              runtime::ReplayOutcome::launched)
        << "call " << call;
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the caller's stream alone
    std::int32_t seen[3] = {0, 0, 0};
    ASSERT_EQ(cudaMemcpy(seen, words, sizeof seen, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen[0], call) << "epoch";
    EXPECT_EQ(seen[1], call) << "slot raised by the tail";
    EXPECT_EQ(seen[2], call) << "the stream did not wait for the tail";
    ASSERT_FALSE(monitor.timed_out()) << "call " << call
                                      << ": the head's wait timed out: the tail did not run beside the head "
                                         "after its start";
  }
  cudaGraphExecDestroy(tail_exec);
  cudaGraphExecDestroy(head_exec);
  cudaGraphDestroy(tail);
  cudaGraphDestroy(head);
  cudaEventDestroy(done);
  cudaEventDestroy(started);
  cudaStreamDestroy(capture);
  cudaStreamDestroy(side);
  cudaStreamDestroy(stream);
  cudaFree(words);
}

INSTANTIATE_TEST_SUITE_P(DoneEvent, SplitGraph, testing::Bool(), [](const testing::TestParamInfo<bool>& info) {
  return std::string(info.param ? "RecordedByTheTail" : "RecordedByTheHost");
});

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
    ex.begin(g.stream(r));
    ex.issue(g.stream(r), /*wait_landed=*/false);
    ex.end(g.stream(r));
    // Poll rather than synchronise: if the abort failed to end NCCL's kernel, report it and
    // stop the process instead of hanging the GPU job.
    while (cudaStreamQuery(g.stream(r)) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
        std::fprintf(stderr,
                     "FATAL: rank %d's stream is still busy 30 s after a 0.3 s bound: the NCCL "
                     "watchdog did not end the hung recv\n",
                     r);
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
  EXPECT_THROW(g.executor(1).run(g.stream(1)), DeviceError);
}

// ---------------------------------------------------------------- reduce-add in 16-bit types
//
// Pulled reduce-adds (docs/RUNTIME.md, "Reduce-add chunks") in bf16/f16 over boxes that exercise
// the add kernel's scalar head, 16-byte body and scalar tail: uneven row shards of odd width
// (dim 0) and uneven column shards (dim 1, pitched rows). Inputs lie in [1, 2) with 6
// fraction bits, so partial sums round (the order of adds matters to the last bit) while a
// missing or doubled contribution (>= 1) is far outside the tolerance. Plans whose adds are all
// plain (ring, direct: each rank adds on one stream) must give the same bits every call.

std::uint16_t to_bits(plan::DType t, float v) {
  std::uint16_t b;
  if (t == plan::DType::bf16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&b, &h, 2);
  } else {
    const __half h = __float2half_rn(v);
    std::memcpy(&b, &h, 2);
  }
  return b;
}

float from_bits(plan::DType t, std::uint16_t b) {
  if (t == plan::DType::bf16) {
    __nv_bfloat16 h;
    std::memcpy(&h, &b, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

float input16(int rank, std::int64_t k) { return 1.0f + static_cast<float>((rank * 131 + k * 17) % 61) / 64.0f; }

struct Case16 {
  Collective collective;
  Algorithm algorithm;
  Backend backend;
  plan::DType dtype;
  int split;
  int dim;
};

std::string case16_name(const testing::TestParamInfo<Case16>& info) {
  const auto& c = info.param;
  std::string s = fmt::format("{}_{}_{}_{}_split{}_dim{}", plan::to_string(c.collective), plan::to_string(c.algorithm),
                              plan::to_string(c.backend), plan::to_string(c.dtype), c.split, c.dim);
  for (auto& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

plan::CommPlan make_case16_plan(const Case16& c, int world) {
  auto o = case_options(c.collective, c.algorithm, c.backend, c.dtype, c.split, c.dim, world);
  // dim 0: uneven row shards, rows of 1031 elements (2062 bytes: every row starts at another
  // offset modulo 16); dim 1: 33 rows, uneven column shards of about 40 elements.
  o.shape = c.dim == 0 ? std::vector<std::int64_t>{3 * world * c.split + 1, 1031}
                       : std::vector<std::int64_t>{33, 40 * world * c.split + 3};
  auto p = plan::make_plan(o);
  plan::verify_or_throw(p, case16_name({c, 0}));
  return p;
}

// Raw bytes of tensor `name` on rank r (main thread only).
std::vector<std::uint16_t> read16(LocalGroup& g, int r, const std::string& name) {
  const auto& spec = g.executor(r).plan().tensors.at(name);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(spec.elements()));
  EXPECT_EQ(cudaSetDevice(g.device(r)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), g.executor(r).tensor(r, name), out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// Device buffers of 16-bit values, freed at scope exit (allocated from the main thread).
class Device16 {
 public:
  Device16(int device, const std::vector<std::uint16_t>& values) : device_(device) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&ptr_, values.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, values.data(), values.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device16() {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }
  Device16(const Device16&) = delete;
  Device16& operator=(const Device16&) = delete;
  const void* get() const { return ptr_; }

 private:
  int device_ = 0;
  void* ptr_ = nullptr;
};

class ReduceAdd16 : public testing::TestWithParam<Case16> {};

TEST_P(ReduceAdd16, SumsWithinRoundingAndPlainAddsAreDeterministic) {
  const int world = test_world();
  const Case16 c = GetParam();
  if (c.backend == Backend::nccl && world > device_count()) GTEST_SKIP() << "nccl needs one GPU per rank";
  const auto p = make_case16_plan(c, world);
  const auto tables = lower::lower(p, lower::TileGrid{1, 1, 1, 1}, {});
  bool any_atomic = false;
  for (int r = 0; r < world; ++r)
    for (const auto& steps : runtime::make_rank_schedule(p, tables, r).streams)
      for (const auto& step : steps) any_atomic = any_atomic || step.atomic_add;
  const bool must_be_deterministic = c.algorithm != Algorithm::bidir;
  if (must_be_deterministic) ASSERT_FALSE(any_atomic) << "ring and direct add on one stream per rank";

  LocalGroup g(p, test_options());
  const auto& x = p.collective.tensor;
  const auto& shape = p.tensors.at(x).shape;
  const std::int64_t n = p.tensors.at(x).elements();
  std::vector<std::unique_ptr<Device16>> staged;
  std::vector<std::vector<float>> given(world);  // the inputs as the device holds them
  for (int r = 0; r < world; ++r) {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) {
      bits[k] = to_bits(c.dtype, input16(r, k));
      given[r].push_back(from_bits(c.dtype, bits[k]));
    }
    staged.push_back(std::make_unique<Device16>(g.device(r), bits));
  }
  // Each rounding of a partial sum (< 2 * world) is at most half an ulp; world - 1 of them.
  const float ulp = std::ldexp(2.0f * world, c.dtype == plan::DType::bf16 ? -7 : -10);
  const float tolerance = 0.5f * ulp * world + 1e-6f;
  std::vector<std::vector<std::uint16_t>> first(world);
  for (std::int64_t epoch = 1; epoch <= 3; ++epoch) {
    g.on_every_rank([&](int r) {
      ordered_call(g, r, staged[r]->get(), n * 2);
      ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    });
    g.monitor().check();
    for (int q = 0; q < world; ++q) {
      const auto out = read16(g, q, x);
      int wrong = 0;
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t i = along(shape, c.dim, k);
        if (c.collective == Collective::reduce_scatter && owner(i, shape[c.dim], world) != q) continue;
        double want = 0;
        for (int r = 0; r < world; ++r) want += given[r][k];
        const float got = from_bits(c.dtype, out[k]);
        if (std::fabs(got - want) > tolerance) {
          if (wrong < 5)
            ADD_FAILURE() << fmt::format("rank {}, epoch {}, element {} (index {} along dim {}): got {}, want {} +- {}",
                                         q, epoch, k, i, c.dim, got, want, tolerance);
          ++wrong;
        }
      }
      ASSERT_EQ(wrong, 0) << "rank " << q << ", epoch " << epoch;
      if (epoch == 1) first[q] = out;
      if (must_be_deterministic && epoch > 1) {
        std::int64_t differ = 0;
        for (std::int64_t k = 0; k < n; ++k) differ += out[k] != first[q][k];
        EXPECT_EQ(differ, 0) << "rank " << q << ": plain adds gave other bits at epoch " << epoch
                             << " than at epoch 1 for the same inputs";
      }
    }
  }
  std::printf("%s: world %d, %s adds\n", case16_name({c, 0}).c_str(), world, any_atomic ? "some atomic" : "plain");
}

std::vector<Case16> case16_all() {
  std::vector<Case16> out;
  for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
    for (auto coll : {Collective::reduce_scatter, Collective::all_reduce})
      for (auto alg : {Algorithm::ring, Algorithm::direct, Algorithm::bidir}) {
        out.push_back({coll, alg, backend, plan::DType::bf16, 1, 0});
        out.push_back({coll, alg, backend, plan::DType::bf16, 2, 1});
      }
    out.push_back({Collective::reduce_scatter, Algorithm::direct, backend, plan::DType::f16, 1, 1});
    out.push_back({Collective::all_reduce, Algorithm::bidir, backend, plan::DType::f16, 2, 0});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, ReduceAdd16, testing::ValuesIn(case16_all()), case16_name);

// The atomic add path on any world >= 2: a world-2 direct reduce-scatter whose chunk into
// rank 1 is issued twice, on two streams of rank 1, into the same box; the schedule must mark
// both adds atomic, and rank 1's shard must end as x1 + 2 * x0 (small integers: exact in any
// order). Odd row width: scalar heads and tails beside the packed-pair body.
class AtomicAdds : public testing::TestWithParam<std::tuple<Backend, plan::DType>> {};

TEST_P(AtomicAdds, TwoStreamsAddingIntoOneBoxLoseNothing) {
  const auto [backend, dtype] = GetParam();
  if (backend == Backend::nccl && device_count() < 2) GTEST_SKIP() << "nccl needs one GPU per rank";
  plan::TemplateOptions o;
  o.collective = Collective::reduce_scatter;
  o.algorithm = Algorithm::direct;
  o.world_size = 2;
  o.dtype = dtype;
  o.backend = backend;
  o.shape = {301, 517};
  auto p = plan::make_plan(o);
  int into_1 = -1;
  for (const auto& ch : p.chunks)
    if (ch.dst == 1) into_1 = ch.id;
  ASSERT_GE(into_1, 0);
  plan::Chunk again = p.chunks[into_1];
  again.id = static_cast<int>(p.chunks.size());
  again.stream = 1;
  again.group = plan::kNoGroup;
  p.chunks.push_back(again);
  for (auto& rp : p.ranks) {
    rp.streams.resize(2);
    if (rp.rank == 1 || (backend == Backend::nccl && rp.rank == 0)) rp.streams[1].push_back(again.id);
  }
  const auto tables = lower::lower(p, lower::TileGrid{1, 1, 1, 1}, {});
  int atomic_steps = 0;
  for (const auto& steps : runtime::make_rank_schedule(p, tables, 1).streams)
    for (const auto& step : steps) atomic_steps += step.atomic_add;
  ASSERT_EQ(atomic_steps, 2);

  LocalGroup g(p, test_options());
  const auto& x = p.collective.tensor;
  const std::int64_t n = p.tensors.at(x).elements();
  const bool wide = dtype == plan::DType::f32 || dtype == plan::DType::i32;
  auto value = [](int r, std::int64_t k) { return static_cast<int>((r * 37 + k * 11) % 29) - 14; };
  std::vector<std::unique_ptr<Device16>> staged;  // 4-byte types go in as pairs of 16-bit words
  for (int r = 0; r < 2; ++r) {
    std::vector<std::uint16_t> words(static_cast<std::size_t>(n * (wide ? 2 : 1)));
    for (std::int64_t k = 0; k < n; ++k) {
      const int v = value(r, k);
      if (dtype == plan::DType::f32) {
        const float f = static_cast<float>(v);
        std::memcpy(&words[2 * k], &f, 4);
      } else if (dtype == plan::DType::i32) {
        std::memcpy(&words[2 * k], &v, 4);
      } else {
        words[k] = to_bits(dtype, static_cast<float>(v));
      }
    }
    staged.push_back(std::make_unique<Device16>(g.device(r), words));
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * plan::dtype_size(dtype);
  g.on_every_rank([&](int r) {
    ordered_call(g, r, staged[r]->get(), bytes);
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
  });
  g.monitor().check();
  std::vector<std::uint16_t> words(bytes / 2);
  ASSERT_EQ(cudaSetDevice(g.device(1)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(words.data(), g.executor(1).tensor(1, x), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  const auto& box = p.chunks[into_1].dst_box;
  int wrong = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t row = k / o.shape[1];
    const bool in_box = row >= box.offset[0] && row < box.offset[0] + box.extent[0];
    const int want = value(1, k) + (in_box ? 2 * value(0, k) : 0);
    float got = 0;
    if (dtype == plan::DType::f32) {
      std::memcpy(&got, &words[2 * k], 4);
    } else if (dtype == plan::DType::i32) {
      int i = 0;
      std::memcpy(&i, &words[2 * k], 4);
      got = static_cast<float>(i);
    } else {
      got = from_bits(dtype, words[k]);
    }
    if (got != static_cast<float>(want)) {
      if (wrong < 5) ADD_FAILURE() << fmt::format("element {} (row {}): got {}, want {}", k, row, got, want);
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, AtomicAdds,
                         testing::Combine(testing::Values(Backend::copy_engine, Backend::sm_copy, Backend::nccl),
                                          testing::Values(plan::DType::bf16, plan::DType::f16, plan::DType::f32,
                                                          plan::DType::i32)),
                         [](const testing::TestParamInfo<std::tuple<Backend, plan::DType>>& info) {
                           std::string s = fmt::format("{}_{}", plan::to_string(std::get<0>(info.param)),
                                                       plan::to_string(std::get<1>(info.param)));
                           for (auto& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// Reduce-add bandwidth per backend, printed for the lead (never asserted: performance lives in
// benchmarks). World 2, one GPU per rank: a direct reduce-scatter of a 2 x 32 MiB bf16 tensor
// (8192 x 4096), so each rank pulls and adds one 32 MiB chunk per call; beside it the same
// bytes as a direct all-gather (a plain copy: the link's ceiling for that backend). 5 warm-up
// calls, then 20 timed calls back to back; GB/s = 32 MiB / (time per call), the slower rank.
// Add and SM-copy kernels get 16 blocks (what the fused ops give them), and 64 for comparison.
double seconds_per_call(const plan::CommPlan& p, int calls, int blocks) {
  runtime::ExecutorOptions options = test_options();
  options.sm_copy_blocks = blocks;
  LocalGroup g(p, options);
  std::vector<double> per_rank(2, 0.0);
  g.on_every_rank([&](int r) {
    auto& ex = g.executor(r);
    ASSERT_EQ(cudaMemsetAsync(ex.tensor(r, p.collective.tensor), 0, p.tensors.at(p.collective.tensor).elements() * 2,
                              g.stream(r)),
              cudaSuccess);
    for (int i = 0; i < 5; ++i) ex.run(g.stream(r));
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    g.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) ex.run(g.stream(r));
    ASSERT_EQ(cudaStreamSynchronize(g.stream(r)), cudaSuccess);
    per_rank[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
  });
  g.monitor().check();
  return std::max(per_rank[0], per_rank[1]);
}

// One test per backend, named after it (run.sh runs the nccl ones apart).
class ReduceAddBandwidth : public testing::TestWithParam<Backend> {};

TEST_P(ReduceAddBandwidth, PrintsGBsFor32MiBChunks) {
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs (one per rank)";
  if (test_world() != 2) GTEST_SKIP() << "printed once, in the world-2 run";
  constexpr double kChunkBytes = 32.0 * 1024 * 1024;
  const Backend backend = GetParam();
  auto gbs = [&](Collective coll, int blocks) {
    plan::TemplateOptions o;
    o.collective = coll;
    o.algorithm = Algorithm::direct;
    o.world_size = 2;
    o.dtype = plan::DType::bf16;
    o.backend = backend;
    o.shape = {8192, 4096};
    return kChunkBytes / seconds_per_call(plan::make_plan(o), 20, blocks) / 1e9;
  };
  const double add16 = gbs(Collective::reduce_scatter, 16);
  const double copy16 = gbs(Collective::all_gather, 16);
  const double add64 = gbs(Collective::reduce_scatter, 64);
  std::printf(
      "reduce-add bandwidth: %-11s 32 MiB reduce-add %7.1f GB/s (64 blocks: %7.1f), 32 MiB copy %7.1f GB/s, "
      "add/copy %.2f\n",
      std::string(plan::to_string(backend)).c_str(), add16, add64, copy16, add16 / copy16);
  std::fflush(stdout);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, ReduceAddBandwidth,
                         testing::Values(Backend::copy_engine, Backend::sm_copy, Backend::nccl),
                         [](const testing::TestParamInfo<Backend>& info) {
                           std::string s(plan::to_string(info.param));
                           for (auto& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace syncopate::gpu_test
