#include "text_files.hpp"

#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::cli {

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot open the {} file for reading", path, what));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text_file(const std::string& path, const std::string& text, std::string_view what) {
  if (path.empty() || path == "-") {
    fmt::print("{}", text);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw UserError(fmt::format("{}: cannot write the {} file", path, what));
}

}  // namespace syncopate::cli
