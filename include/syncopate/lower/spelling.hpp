// JSON/CLI spellings of the lowering enums, in the plan layer's one-table-per-enum scheme, so
// plan::to_string / plan::parse_enum / plan::enum_choices work on them too.
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::plan {

template <>
struct EnumTable<lower::SlotKind> {
  static constexpr std::string_view kind = "slot kind";
  static constexpr std::array<std::pair<lower::SlotKind, std::string_view>, 3> entries{
      {{lower::SlotKind::landing, "landing"},
       {lower::SlotKind::ready, "ready"},
       {lower::SlotKind::dst_ready, "dst-ready"}}};
};

template <>
struct EnumTable<lower::AccessRole> {
  static constexpr std::string_view kind = "role";
  static constexpr std::array<std::pair<lower::AccessRole, std::string_view>, 2> entries{
      {{lower::AccessRole::consume, "consume"}, {lower::AccessRole::produce, "produce"}}};
};

}  // namespace syncopate::plan
