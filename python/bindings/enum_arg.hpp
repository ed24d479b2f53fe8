// Python <-> C++ conversion of the IR enums through their one spelling table (plan/enums.hpp).
//
// Python callers pass enums as strings. The table's spelling is accepted as is ("all-gather",
// "copy-engine"), and so is the same word with underscores ("all_gather"), since that is how a
// Python identifier or keyword argument would spell it. Anything else is a UserError
// (syncopate.UserError, a ValueError) naming the argument and listing the accepted spellings.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::python {

template <class E>
E enum_arg(std::string_view text, std::string_view argument) {
  if (auto value = plan::parse_enum<E>(text)) return *value;
  std::string dashed(text);
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  if (auto value = plan::parse_enum<E>(dashed)) return *value;
  throw UserError(std::string("argument '") + std::string(argument) + "': unknown " +
                  std::string(plan::EnumTable<E>::kind) + " '" + std::string(text) +
                  "'; expected one of: " + plan::enum_choices<E>());
}

template <class E>
std::string enum_str(E value) {
  return std::string(plan::to_string(value));
}

}  // namespace syncopate::python
