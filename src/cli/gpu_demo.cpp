// run_gpu_demo() and friends: see gpu_demo.hpp.
#include "gpu_demo.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "repo_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/common/settings.hpp"

extern char** environ;

namespace syncopate::cli {
namespace {

namespace fs = std::filesystem;

// The three driver entry points used, with the driver's C types spelled out (no cuda.h here).
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuGetErrorString = int (*)(int, const char**);

class Library {
 public:
  explicit Library(const char* name) : handle_(dlopen(name, RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  explicit operator bool() const { return handle_ != nullptr; }
  void* symbol(const char* name) const { return dlsym(handle_, name); }

 private:
  void* handle_;
};

std::string driver_error(const Library& lib, int code) {
  const char* text = nullptr;
  if (auto fn = reinterpret_cast<CuGetErrorString>(lib.symbol("cuGetErrorString")); fn != nullptr) fn(code, &text);
  return text != nullptr ? fmt::format("CUDA error {}: {}", code, text) : fmt::format("CUDA error {}", code);
}

fs::path source_tree() {
#ifdef SYNCOPATE_SOURCE_DIR
  return fs::path(SYNCOPATE_SOURCE_DIR);
#else
  return fs::current_path();
#endif
}

}  // namespace

int run_process(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  std::fflush(stdout);  // what this process printed comes before the child's output
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    errno = err;
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

GpuCount count_cuda_gpus() {
  const std::string library = settings::demo_libcuda();
  const char* name = library.c_str();
  Library lib(name);
  if (!lib) {
    const char* why = dlerror();
    return {0, fmt::format("no CUDA driver: {}", why != nullptr ? why : name)};
  }
  auto init = reinterpret_cast<CuInit>(lib.symbol("cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(lib.symbol("cuDeviceGetCount"));
  if (init == nullptr || count == nullptr)
    return {0, fmt::format("{} lacks cuInit/cuDeviceGetCount: not a CUDA driver", name)};
  if (const int rc = init(0); rc != 0)
    return {0, fmt::format("the CUDA driver did not start: {}", driver_error(lib, rc))};
  int n = 0;
  if (const int rc = count(&n); rc != 0) return {0, fmt::format("cuDeviceGetCount failed: {}", driver_error(lib, rc))};
  if (n == 0) return {0, "the CUDA driver reports no device"};
  return {n, {}};
}

std::string demo_python() {
  if (auto python = settings::python()) return *python;
  std::error_code ec;
  for (const auto& venv : {fs::current_path(ec) / ".venv/bin/python", source_tree() / ".venv/bin/python"})
    if (fs::exists(venv, ec)) return venv.string();
  return "python3";
}

int run_gpu_demo(const GpuDemoRequest& request) {
  const GpuCount gpus = count_cuda_gpus();
  if (gpus.count == 0) {
    fmt::print(
        "GPU: none found ({}); the GPU half (the fused AG+GEMM against sequential NCCL + torch.mm on "
        "real GPUs) runs where GPUs are.\n",
        gpus.why_none);
    return 0;
  }
  const std::string python = demo_python();
  fmt::print("\n[7] GPU: {} GPU(s) found; the fused AG+GEMM against sequential, measured ({} -m syncopate.demo)\n",
             gpus.count, python);
  const int probe = run_process({python, "-c", "import syncopate._core, syncopate.demo, torch, triton"}, true);
  if (probe < 0) {
    fmt::print(stderr,
               "error: cannot run {} ({}); set SYNCOPATE_PYTHON to a python with syncopate, torch and "
               "triton installed\n",
               python, std::strerror(errno));
    return 1;
  }
  if (probe != 0) {
    fmt::print(stderr,
               "error: {} cannot import the Python package syncopate (with torch and triton), which runs the "
               "GPU half. Install it with\n    {} -m pip install {}\n(offline, as on the GPU machines: add "
               "--no-build-isolation), or set SYNCOPATE_PYTHON to a python that has it. scripts/demo.sh does this "
               "for you.\n",
               python, python, source_tree().string());
    return 1;
  }
  std::vector<std::string> argv{python,
                                "-m",
                                "syncopate.demo",
                                "--m",
                                std::to_string(request.m),
                                "--k",
                                std::to_string(request.k),
                                "--n",
                                std::to_string(request.n)};
  if (!request.calib.empty()) {
    argv.emplace_back("--calib");
    argv.push_back(request.calib.string());
  }
  const int status = run_process(argv, false);
  if (status < 0) {
    fmt::print(stderr, "error: could not start {}: {}\n", python, std::strerror(errno));
    return 1;
  }
  return status;
}

}  // namespace syncopate::cli
