// Reading and writing the CLI's input and output files, with errors that name the file.
#pragma once

#include <string>
#include <string_view>

namespace syncopate::cli {

// The whole file. UserError "<path>: cannot open the <what> file for reading".
std::string read_text_file(const std::string& path, std::string_view what);

// Writes `text` to `path`, or to standard output when `path` is empty or "-".
// UserError "<path>: cannot write the <what> file".
void write_text_file(const std::string& path, const std::string& text, std::string_view what);

}  // namespace syncopate::cli
