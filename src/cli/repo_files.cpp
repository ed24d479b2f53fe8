#include "repo_files.hpp"

#include <string>
#include <system_error>
#include <vector>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::cli {

namespace fs = std::filesystem;

fs::path find_repo_file(std::string_view relative, std::string_view option) {
  std::vector<fs::path> tried{fs::path(relative)};
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; up < 5 && !ec && !dir.empty() && dir != dir.root_path(); ++up, dir = dir.parent_path())
    tried.push_back(dir / relative);
#ifdef SYNCOPATE_SOURCE_DIR
  tried.push_back(fs::path(SYNCOPATE_SOURCE_DIR) / relative);
#endif
  for (const auto& p : tried)
    if (fs::is_regular_file(p, ec)) return p;
  std::string places;
  for (const auto& p : tried) places += fmt::format("\n  {}", p.string());
  throw UserError(
      fmt::format("{}: file-not-found: {} was not found; pass {} FILE. Tried:{}", option, relative, option, places));
}

}  // namespace syncopate::cli
