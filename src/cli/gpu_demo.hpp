// The GPU half of `syncopate demo`: finds out whether CUDA GPUs are present without linking
// CUDA (the driver is dlopen'ed), then runs the Python demo (`python -m syncopate.demo`), which
// launches the Triton fused kernels. Nothing here needs a GPU to build or to run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace syncopate::cli {

struct GpuCount {
  int count = 0;
  std::string why_none;  // when count == 0: what was missing (driver, devices)
};

// Loads the CUDA driver (libcuda.so.1, or $SYNCOPATE_DEMO_LIBCUDA: a test hook) and asks it
// for the number of visible devices (cuInit + cuDeviceGetCount; CUDA_VISIBLE_DEVICES applies).
GpuCount count_cuda_gpus();

// The python that runs the GPU half: $SYNCOPATE_PYTHON, else the .venv of the source tree
// (made by scripts/setup.sh), else python3 from PATH.
std::string demo_python();

// Runs argv[0] (looked up in PATH) with argv; its exit status, 128 + signal if killed, or -1
// (errno set) when it could not start. Output goes to this process's stdout/stderr unless `quiet`.
int run_process(const std::vector<std::string>& argv, bool quiet);

struct GpuDemoRequest {
  std::int64_t m = 0, n = 0, k = 0;
  std::filesystem::path calib;  // the calibration the CPU part used, for the prediction
};

// Prints what it finds, runs the Python demo where GPUs are present and returns the exit
// status to pass on: 0 when there is no GPU, the Python demo's status otherwise, 1 when the
// Python package cannot be imported (after saying how to install it).
int run_gpu_demo(const GpuDemoRequest& request);

}  // namespace syncopate::cli
