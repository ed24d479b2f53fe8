// Every environment variable the C++ code reads, in one place (docs/PYTHON.md, "Settings", has
// the table with the Python package's, python/syncopate/settings.py). Each is read when the
// function is called; no value is cached.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace syncopate::settings {

// $name when it is set and not empty.
inline std::optional<std::string> read(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// SYNCOPATE_NCCL_LIBRARY: the NCCL library the nccl backend loads with dlopen.
inline std::string nccl_library() { return read("SYNCOPATE_NCCL_LIBRARY").value_or("libnccl.so.2"); }

// SYNCOPATE_DEMO_LIBCUDA: the CUDA driver library `syncopate demo` loads to count GPUs.
inline std::string demo_libcuda() { return read("SYNCOPATE_DEMO_LIBCUDA").value_or("libcuda.so.1"); }

// SYNCOPATE_PYTHON: the python that `syncopate demo` (GPU half) and `syncopate transform --check`
// run; unset, the CLI looks for a .venv (src/cli/gpu_demo.cpp, demo_python).
inline std::optional<std::string> python() { return read("SYNCOPATE_PYTHON"); }

}  // namespace syncopate::settings
