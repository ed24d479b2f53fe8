// Test helper: the UserError message lower() gives for bad input.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"

namespace syncopate::testing {

// Runs lower() and returns the UserError message (fails the test when nothing is thrown).
inline std::string lower_error(const plan::CommPlan& plan, const lower::TileGrid& grid,
                               const std::vector<lower::TileAccess>& accesses) {
  try {
    (void)lower::lower(plan, grid, accesses);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "lower() accepted the input";
  return {};
}

}  // namespace syncopate::testing
