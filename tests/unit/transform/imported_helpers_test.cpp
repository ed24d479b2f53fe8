// Helpers imported from another module (`from .lib import f`, `from pkg.lib import f`) are read
// from their module's source and followed like helpers of the kernel's own file
// (docs/ANNOTATIONS.md, "Helpers"): a read inside one before the wait is refused naming the
// helper's file:line:col, a store inside one may be marked by `@sy.produce` (the notify goes
// after the call, with a store wait for a TMA store), and a module that cannot be found or that
// does not define the name is refused at the import's file:line:col. Each test writes its
// modules into a fresh temporary folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "syncopate/common/error.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// A temporary folder holding a kernel file and the modules it imports.
class Tree {
 public:
  Tree() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / fmt_name(info->test_suite_name(), info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~Tree() { fs::remove_all(root_); }

  fs::path write(const std::string& relative, const std::string& text) const {
    const fs::path p = root_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  const fs::path& root() const { return root_; }

 private:
  static std::string fmt_name(const std::string& suite, const std::string& test) {
    return "syncopate-imports-" + suite + "-" + test + "-" + std::to_string(::getpid());
  }
  fs::path root_;
};

// Lines 1-4 of every kernel file, then its imports (line 5) and the kernel from line 7 on.
constexpr const char* kHeader =
    "import triton\n"                 // 1
    "import triton.language as tl\n"  // 2
    "\n"                              // 3
    "\n";                             // 4

// A K loop and two store helpers, in a module of their own (lines 1-...).
constexpr const char* kLib =
    "import triton\n"                                                               // 1
    "import triton.language as tl\n"                                                // 2
    "\n"                                                                            // 3
    "\n"                                                                            // 4
    "@triton.jit\n"                                                                 // 5
    "def k_loop(x_desc, off_m, k_tiles, acc, BK: tl.constexpr):\n"                  // 6
    "    for ki in range(k_tiles):\n"                                               // 7
    "        acc += tl.sum(x_desc.load([off_m, ki * BK]), axis=1)\n"                // 8
    "    return acc\n"                                                              // 9
    "\n"                                                                            // 10
    "\n"                                                                            // 11
    "@triton.jit\n"                                                                 // 12
    "def store_rows(y_ptr, rows, value):\n"                                         // 13
    "    tl.store(y_ptr + rows, value)\n"                                           // 14
    "\n"                                                                            // 15
    "\n"                                                                            // 16
    "@triton.jit\n"                                                                 // 17
    "def store_tile(y_desc, off_m, value, POINTERS: tl.constexpr, y_ptr, rows):\n"  // 18
    "    if POINTERS:\n"                                                            // 19
    "        store_rows(y_ptr, rows, value)\n"                                      // 20
    "    else:\n"                                                                   // 21
    "        y_desc.store([off_m], value)\n"                                        // 22
    "\n"                                                                            // 23
    "\n"                                                                            // 24
    "@triton.jit\n"                                                                 // 25
    "def offsets(pid_m, BM: tl.constexpr):\n"                                       // 26
    "    return pid_m * BM + tl.arange(0, BM)\n";                                   // 27

// The kernel: line 5 holds `import_line`, the kernel's def is line 8.
std::string kernel(const std::string& import_line, const std::string& before_consume, const std::string& tail) {
  return std::string(kHeader) + import_line +                                                                   // 5
         "\n"                                                                                                   // 6
         "@triton.jit\n"                                                                                        // 7
         "def k(x_ptr, y_ptr, M, K, BM: tl.constexpr, BK: tl.constexpr):\n"                                     // 8
         "    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"  // 9
         "    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M], strides=[1], block_shape=[BM])\n"            // 10
         "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"                                                    // 11
         "    pid_m = tl.program_id(0)\n"                                                                       // 12
         "    # @sy.end\n"                                                                                      // 13
         "    acc = tl.zeros((BM,), dtype=tl.float32)\n"                                                        // 14
         + before_consume +                                                                                     // 15..
         tail;
}

const std::string kConsumeThenLoop =
    "    # @sy.consume(x_ptr, m=pid_m)\n"
    "    acc = k_loop(x_desc, pid_m * BM, tl.cdiv(K, BK), acc, BK)\n";
const std::string kPointerStore =
    "    # @sy.produce(y_ptr, m=pid_m)\n"
    "    store_rows(y_ptr, offsets(pid_m, BM), acc)\n";

std::string transform_file(const fs::path& file, const std::vector<std::string>& module_paths = {}) {
  std::ifstream in(file, std::ios::binary);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TransformOptions options;
  options.module_paths = module_paths;
  return transform_kernel(source, file.string(), "k", options).source;
}

std::string error_of(const fs::path& file, const std::vector<std::string>& module_paths = {}) {
  try {
    transform_file(file, module_paths);
  } catch (const TransformError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ImportedHelpers, ARelativeImportIsFoundBesideTheKernelAndCoveredByTheWait) {
  Tree t;
  t.write("pkg/__init__.py", "");
  t.write("pkg/lib.py", kLib);
  const auto file =
      t.write("pkg/k.py", kernel("from .lib import k_loop, offsets, store_rows\n", kConsumeThenLoop, kPointerStore));
  const auto out = transform_file(file);
  EXPECT_LT(out.find("syl.wait_for_tile("), out.find("    acc = k_loop(")) << out;
  // The notify follows the imported helper's store; a plain store needs no store wait.
  const auto store = out.find("    store_rows(y_ptr, offsets(pid_m, BM), acc)\n");
  ASSERT_NE(store, std::string::npos) << out;
  EXPECT_LT(store, out.find("syl.notify_tile")) << out;
  EXPECT_FALSE(has(out, "syl.tma_store_wait")) << out;
}

TEST(ImportedHelpers, AReadInsideAnImportedHelperBeforeTheWaitIsRefusedNamingItsFile) {
  Tree t;
  t.write("pkg/__init__.py", "");
  const auto lib = t.write("pkg/lib.py", kLib);
  const auto file = t.write("pkg/k.py", kernel("from .lib import k_loop as loop, offsets, store_rows\n",
                                               "    acc = loop(x_desc, pid_m * BM, tl.cdiv(K, BK), acc, BK)\n"
                                               "    # @sy.consume(x_ptr, m=pid_m)\n",
                                               kPointerStore));
  const auto msg = error_of(file);
  EXPECT_TRUE(has(msg, file.string() +
                           ":15:11: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (loop through "
                           "'x_desc', which reads it in 'k_loop' at " +
                           lib.string() + ":8:30) before the wait"))
      << msg;
}

TEST(ImportedHelpers, AnAbsoluteImportIsFoundOnTheModulePathsOrUnderThePackageRoot) {
  Tree t;
  t.write("lib/mylib/__init__.py", "");
  t.write("lib/mylib/gemm.py", kLib);
  const auto file = t.write(
      "kernels/k.py", kernel("from mylib.gemm import k_loop, offsets, store_rows\n", kConsumeThenLoop, kPointerStore));
  EXPECT_TRUE(has(transform_file(file, {(t.root() / "lib").string()}), "syl.notify_tile")) << file;
  // A kernel inside the package finds the package's other modules without a module path.
  t.write("lib/mylib/kernels/__init__.py", "");
  const auto inside = t.write("lib/mylib/kernels/k.py", kernel("from mylib.gemm import k_loop, offsets, store_rows\n",
                                                               kConsumeThenLoop, kPointerStore));
  EXPECT_TRUE(has(transform_file(inside), "syl.notify_tile")) << inside;
}

TEST(ImportedHelpers, AModuleThatCannotBeFoundIsRefusedAtTheImport) {
  Tree t;
  const auto file =
      t.write("k.py", kernel("from mylib.gemm import k_loop, offsets, store_rows\n", kConsumeThenLoop, kPointerStore));
  const auto msg = error_of(file, {(t.root() / "nowhere").string()});
  EXPECT_TRUE(has(msg, file.string() + ":5:1: from mylib.gemm import ")) << msg;
  EXPECT_TRUE(has(msg, "cannot find the module")) << msg;
  EXPECT_TRUE(has(msg, (t.root() / "nowhere" / "mylib" / "gemm.py").string())) << msg;
  EXPECT_TRUE(has(msg, "--module-path")) << msg;
  // A relative import looks beside the file only.
  const auto relative =
      t.write("r.py", kernel("from .missing import k_loop, offsets, store_rows\n", kConsumeThenLoop, kPointerStore));
  const auto rmsg = error_of(relative);
  EXPECT_TRUE(has(rmsg, relative.string() + ":5:1: from .missing import ")) << rmsg;
  EXPECT_TRUE(has(rmsg, (t.root() / "missing.py").lexically_normal().string())) << rmsg;
}

TEST(ImportedHelpers, AModuleThatDoesNotDefineTheNameIsRefused) {
  Tree t;
  t.write("lib.py", kLib);
  const auto file = t.write("k.py", kernel("from .lib import k_loop, offsets, store_rows, scale\n",
                                           kConsumeThenLoop + "    acc = scale(acc)\n", kPointerStore));
  const auto msg = error_of(file);
  EXPECT_TRUE(has(msg, file.string() + ":5:1: from .lib import scale: ")) << msg;
  EXPECT_TRUE(has(msg, "defines no function 'scale'")) << msg;
}

TEST(ImportedHelpers, AnImportTheKernelNeverCallsIsNotLookedFor) {
  Tree t;
  t.write("lib.py", kLib);
  // `host_only` comes from a module that is nowhere; only host code calls it.
  const auto file =
      t.write("k.py", kernel("from .lib import k_loop, offsets, store_rows\nfrom nowhere import host_only\n",
                             kConsumeThenLoop, kPointerStore) +
                          "\n\ndef launch():\n    return host_only()\n");
  EXPECT_TRUE(has(transform_file(file), "syl.notify_tile")) << file;
}

TEST(ImportedHelpers, AProduceOnAnImportedTmaStoreGetsAStoreWaitAfterTheCall) {
  Tree t;
  t.write("pkg/__init__.py", "from .impl import store_tile, offsets, k_loop\n");  // re-exported
  t.write("pkg/impl.py", std::string(kLib) + "\n\nfrom .more import nothing_called\n");
  const auto file =
      t.write("k.py", kernel("from pkg import k_loop, offsets, store_tile\n", kConsumeThenLoop,
                             "    # @sy.produce(y_ptr, m=pid_m)\n"
                             "    store_tile(y_desc, pid_m * BM, acc, False, y_ptr, offsets(pid_m, BM))\n"));
  const auto out = transform_file(file);
  const auto call = out.find("    store_tile(y_desc, pid_m * BM, acc, False, y_ptr, offsets(pid_m, BM))\n");
  ASSERT_NE(call, std::string::npos) << out;
  // store_tile holds a descriptor store (behind a constexpr branch): the notify waits for it.
  EXPECT_LT(call, out.find("syl.tma_store_wait")) << out;
  EXPECT_LT(out.find("syl.tma_store_wait"), out.find("syl.notify_tile")) << out;
}

TEST(ImportedHelpers, AProduceOnAnImportedHelperThatStoresNothingIsRefused) {
  Tree t;
  t.write("lib.py", kLib);
  const auto file = t.write("k.py", kernel("from .lib import k_loop, offsets\n", kConsumeThenLoop,
                                           "    # @sy.produce(y_ptr, m=pid_m)\n"
                                           "    acc = offsets(pid_m, BM) + y_ptr\n"
                                           "    tl.store(y_ptr + offsets(pid_m, BM), acc)\n"));
  const auto msg = error_of(file);
  EXPECT_TRUE(has(msg, "does not store 'y_ptr'")) << msg;
}

}  // namespace
}  // namespace syncopate::transform
