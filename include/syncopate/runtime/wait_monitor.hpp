// Host side of bounded waits: owns the WaitRecord the device wait kernels fill on a timeout.
//
// The record lives in pinned, mapped host memory, readable by the host while kernels still run
// and writable by every device in the process (one monitor may serve several ranks in the
// single-process mode). check() is cheap (a host read): call it after synchronising the
// streams the waits ran on, or any time to poll.
#pragma once

#include "syncopate/runtime/wait_record.hpp"

namespace syncopate::runtime {

class WaitMonitor {
 public:
  WaitMonitor();  // throws DeviceError
  ~WaitMonitor();
  WaitMonitor(const WaitMonitor&) = delete;
  WaitMonitor& operator=(const WaitMonitor&) = delete;

  // Device-visible pointer for wait kernels.
  WaitRecord* device_record() const { return device_record_; }
  // A copy of the record as it stands now.
  WaitRecord snapshot() const;
  // Whether a wait has timed out (the record's flag alone: a host read, no copy of the record).
  bool timed_out() const;
  // Throws WaitTimeoutError naming rank, slot, expected, seen and chunk if a wait timed out,
  // and clears the record so the next call starts clean.
  void check();
  void clear();

 private:
  WaitRecord* host_record_ = nullptr;
  WaitRecord* device_record_ = nullptr;
};

}  // namespace syncopate::runtime
