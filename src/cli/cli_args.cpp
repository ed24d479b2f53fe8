#include "cli_args.hpp"

#include <charconv>

namespace syncopate::cli {

std::optional<std::vector<std::int64_t>> parse_sizes(std::string_view text, std::size_t parts) {
  std::vector<std::int64_t> sizes;
  while (true) {
    const auto cut = text.find('x');
    const std::string_view part = text.substr(0, cut);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 1) return std::nullopt;
    sizes.push_back(value);
    if (cut == std::string_view::npos) break;
    text.remove_prefix(cut + 1);
  }
  if (parts != 0 && sizes.size() != parts) return std::nullopt;
  return sizes;
}

CLI::Validator sizes_validator(std::size_t parts, std::string what) {
  return CLI::Validator(
      [parts, what](std::string& value) -> std::string {
        if (parse_sizes(value, parts)) return {};
        return fmt::format("expected {} (positive integers joined by 'x'), got '{}'", what, value);
      },
      what);
}

}  // namespace syncopate::cli
