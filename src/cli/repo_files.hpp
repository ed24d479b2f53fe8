// Finding files shipped in the source tree (calibrations, example kernels) from the CLI.
#pragma once

#include <filesystem>
#include <string_view>

namespace syncopate::cli {

// Looks for `relative` (e.g. "calib/h200.json") in the working directory, then above the
// running executable (build trees live inside the source tree), then in the source tree the
// CLI was built from. Throws UserError naming `option` (the flag that overrides the search)
// and every place tried.
std::filesystem::path find_repo_file(std::string_view relative, std::string_view option);

}  // namespace syncopate::cli
