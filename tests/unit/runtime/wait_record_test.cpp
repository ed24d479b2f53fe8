#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/runtime/rank_schedule.hpp"
#include "syncopate/runtime/wait_record.hpp"

namespace syncopate::runtime {
namespace {

TEST(WaitRecord, TimeoutNamesRankSlotExpectedSeenAndChunk) {
  WaitRecord r;
  r.flag = 1;
  r.rank = 1;
  r.owner = 1;
  r.slot = 3;
  r.chunk = 5;
  r.kind = static_cast<int>(WaitKind::landing);
  r.expected = 7;
  r.seen = 6;
  r.bound_ns = 200'000'000;
  try {
    throw_if_timed_out(r);
    FAIL();
  } catch (const WaitTimeoutError& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 1: wait timed out after 200 ms: landing slot 3 on rank 1 (chunk 5) expected >= 7, "
              "seen 6 (the chunk never landed: its backend did not run, or a peer stopped)");
  }
}

TEST(WaitRecord, ControlCountersHaveNoChunk) {
  WaitRecord r;
  r.flag = 1;
  r.rank = 0;
  r.owner = 2;
  r.slot = kExitSlot;
  r.kind = static_cast<int>(WaitKind::exit);
  r.expected = 4;
  r.seen = 3;
  const std::string msg = format_timeout(r);
  EXPECT_NE(msg.find("exit slot 1 on rank 2 expected >= 4, seen 3"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("chunk"), std::string::npos) << msg;
}

TEST(WaitRecord, NoFlagNoError) { EXPECT_NO_THROW(throw_if_timed_out(WaitRecord{})); }

TEST(WaitRecord, UnknownKindStillFormats) {
  WaitRecord r;
  r.flag = 1;
  r.kind = 99;
  EXPECT_NE(format_timeout(r).find("unknown"), std::string::npos);
}

}  // namespace
}  // namespace syncopate::runtime
