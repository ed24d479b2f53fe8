// Seeded random edits of the hand-written import inputs (a line dropped, doubled or swapped with
// the next, a digit changed, a byte flipped) through import_plan: each either imports into a
// plan that verifies, or is refused with a UserError; never a crash, a hang or an InternalError.
// Bounded: 150 edits per file (the ASan job runs it too).
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/verify.hpp"
#include "text_edits.hpp"

namespace syncopate::plan {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start + 1));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

std::string mutate(const std::string& text, std::mt19937& rng) {
  auto lines = lines_of(text);
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  std::string out;
  switch (pick(5)) {
    case 0:
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(pick(lines.size())));
      break;
    case 1: {
      const std::size_t i = pick(lines.size());
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
      break;
    }
    case 2: {
      const std::size_t i = pick(lines.size() - 1);
      std::swap(lines[i], lines[i + 1]);
      break;
    }
    default:
      break;
  }
  for (const auto& l : lines) out += l;
  std::vector<std::size_t> digits;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] >= '0' && out[i] <= '9') digits.push_back(i);
  if (!digits.empty() && pick(2) == 0) out[digits[pick(digits.size())]] = static_cast<char>('0' + pick(10));
  if (pick(8) == 0) out[pick(out.size())] = static_cast<char>(pick(256));
  return out;
}

struct Input {
  std::string format;
  std::string file;
  std::vector<std::int64_t> shape;
};

TEST(ImportFuzz, EveryEditIsImportedAndVerifiedOrRefusedByName) {
  const std::vector<Input> inputs = {
      {"msccl-xml", "ring_allgather.xml", {8, 2}},
      {"msccl-xml", "hierarchical_allgather.xml", {4, 2}},
      {"msccl-xml", "two_step_allreduce.xml", {4, 2}},
      {"msccl-xml", "one_step_allreduce.xml", {4, 2}},
      {"msccl-xml", "alltoall.xml", {3, 2}},
      {"mscclpp-json", "ring_allgather.json", {8, 2}},
      {"mscclpp-json", "two_step_allreduce.json", {2, 2}},
      {"mscclpp-json", "alltoall.json", {3, 2}},
      {"sendrecv", "ring_allgather.json", {}},
      {"sendrecv", "hierarchical_allgather.json", {}},
      {"sendrecv", "two_step_allreduce.json", {}},
      {"sendrecv", "alltoall.json", {}},
  };
  std::mt19937 rng(20261124);
  int imported = 0, refused = 0;
  for (const auto& in : inputs) {
    const std::string text = test_edits::read_good(in.format, in.file);
    const ImportFormat format = *parse_enum<ImportFormat>(in.format);
    for (int i = 0; i < 150; ++i) {
      const std::string edited = mutate(text, rng);
      ImportOptions o;
      o.source = in.file;
      o.shape = in.shape;
      try {
        const ImportedPlan p = import_plan(edited, format, o);
        ASSERT_TRUE(verify(p.plan).ok()) << in.file << " edit " << i;
        ASSERT_EQ(p.origins.size(), p.plan.chunks.size());
        ++imported;
      } catch (const InternalError& e) {
        FAIL() << in.file << " edit " << i << ": internal error: " << e.what() << "\n" << edited;
      } catch (const UserError& e) {
        ASSERT_EQ(std::string(e.what()).rfind(in.file, 0), 0u) << "names the file first: " << e.what();
        ++refused;
      }
    }
  }
  // Both outcomes happen (an edit that keeps a plan valid, e.g. a digit changed back).
  EXPECT_GT(imported, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace syncopate::plan
