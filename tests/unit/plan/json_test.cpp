// Plan JSON: lossless round trip of every template, exact error messages (source, JSON path,
// what was expected, what was there) for malformed input, and the golden plan files.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::plan {
namespace {

using nlohmann::json;

TemplateOptions options(Collective coll, Algorithm algo, int world, int split, Backend backend = Backend::copy_engine) {
  TemplateOptions o;
  o.collective = coll;
  o.algorithm = algo;
  o.world_size = world;
  o.split = split;
  o.backend = backend;
  o.shape = {std::int64_t{world} * split * 3, 5};
  return o;
}

// ---------------------------------------------------------------- round trip

class EveryTemplateJson : public ::testing::TestWithParam<std::tuple<Collective, Algorithm>> {};

TEST_P(EveryTemplateJson, RoundTripsLosslessly) {
  const auto [coll, algo] = GetParam();
  for (int world : {1, 2, 3, 4, 7, 8})
    for (int split : {1, 2, 4})
      for (auto backend : {Backend::copy_engine, Backend::nccl}) {  // sm-copy: HandWrittenFieldsRoundTrip
        const CommPlan plan = make_plan(options(coll, algo, world, split, backend));
        const std::string text = plan_to_json(plan);
        ASSERT_EQ(parse_plan(text), plan) << text;
        ASSERT_EQ(plan_to_json(parse_plan(text)), text);  // and the text is stable
        ASSERT_EQ(parse_plan(plan_to_json(plan, -1)), plan);
      }
}

INSTANTIATE_TEST_SUITE_P(Templates, EveryTemplateJson,
                         ::testing::Combine(::testing::Values(Collective::all_gather, Collective::reduce_scatter,
                                                              Collective::all_reduce, Collective::all_to_all),
                                            ::testing::Values(Algorithm::ring, Algorithm::direct, Algorithm::bidir)),
                         [](const auto& info) {
                           std::string name = std::string(to_string(std::get<0>(info.param))) + "_" +
                                              std::string(to_string(std::get<1>(info.param)));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(PlanJson, HandWrittenFieldsRoundTrip) {
  CommPlan plan;
  plan.collective = {Collective::custom, "", "", 2, Algorithm::direct, 3};
  plan.world_size = 2;
  plan.tensors["weird name.1"] = {{4, 4, 4}, DType::f8e5m2, "col-major"};
  plan.tensors["t"] = {{1}, DType::i64, ""};
  plan.ranks = {{0, {{0}, {}}}, {1, {{0, 1}}}};
  Chunk a{0, "t", {{0}, {1}}, "weird name.1", {{1, 2, 3}, {1, 1, 1}}, 0, 1, Backend::nccl, ChunkOp::reduce_add, 0, {}};
  Chunk b{1, "t", {{0}, {1}}, "t", {{0}, {1}}, 1, 1, Backend::sm_copy, ChunkOp::copy, 0, {0, 0, -7}, 12};
  plan.chunks = {a, b};
  EXPECT_EQ(parse_plan(plan_to_json(plan)), plan);
}

TEST(PlanJson, DestinationIsWrittenOnlyWhenItDiffers) {
  const std::string gather = plan_to_json(make_plan(options(Collective::all_gather, Algorithm::ring, 3, 1)));
  EXPECT_EQ(gather.find("dst_tensor"), std::string::npos);
  EXPECT_EQ(gather.find("dst_box"), std::string::npos);
  const std::string a2a = plan_to_json(make_plan(options(Collective::all_to_all, Algorithm::ring, 3, 1)));
  EXPECT_NE(a2a.find("\"dst_tensor\":\"y\""), std::string::npos);
  EXPECT_NE(a2a.find("\"dst_box\""), std::string::npos);
}

TEST(PlanJson, AbsentOptionalFieldsGetTheirDefaults) {
  const CommPlan plan = parse_plan(R"({"version":1,"collective":{"kind":"custom"},"world_size":1,
      "tensors":{"x":{"shape":[4],"dtype":"f32"}},"ranks":[{"rank":0,"streams":[[0]]}],
      "chunks":[{"id":0,"tensor":"x","box":{"offset":[0],"extent":[4]},"src":0,"dst":0,
                 "backend":"copy-engine","op":"copy","stream":0}]})");
  EXPECT_EQ(plan.tensors.at("x").layout, "row-major");
  EXPECT_EQ(plan.chunks[0].dst_tensor, "x");
  EXPECT_EQ(plan.chunks[0].dst_box, plan.chunks[0].box);
  EXPECT_TRUE(plan.chunks[0].deps.empty());
  EXPECT_EQ(plan.chunks[0].group, kNoGroup);
  EXPECT_EQ(plan.collective.split, 1);
}

TEST(PlanJson, GroupIsWrittenOnlyWhenSet) {
  const std::string copies = plan_to_json(make_plan(options(Collective::all_gather, Algorithm::ring, 3, 1)));
  EXPECT_EQ(copies.find("\"group\""), std::string::npos);
  const CommPlan nccl = make_plan(options(Collective::all_gather, Algorithm::ring, 3, 1, Backend::nccl));
  const std::string text = plan_to_json(nccl);
  EXPECT_NE(text.find("\"deps\":[],\"group\":0}"), std::string::npos) << text;
  EXPECT_EQ(parse_plan(text).chunks[4].group, nccl.chunks[4].group);
}

// ---------------------------------------------------------------- errors name the path

// A valid 48-chunk plan as a JSON document, to break in one place per test.
json valid_document() {
  return json::parse(plan_to_json(make_plan(options(Collective::all_gather, Algorithm::ring, 4, 4))));
}

std::string parse_error(const std::string& text) {
  try {
    parse_plan(text, "plan.json");
  } catch (const PlanParseError& e) {
    return e.what();
  }
  return "(parsed without error)";
}
std::string document_error(const json& document) { return parse_error(document.dump()); }

TEST(PlanJsonErrors, WrongTypeDeepInAChunk) {
  json doc = valid_document();
  doc["chunks"][12]["box"]["offset"][1] = "x";
  EXPECT_EQ(document_error(doc), R"(plan.json: chunks[12].box.offset[1]: expected an integer, got "x")");
}

TEST(PlanJsonErrors, MissingRequiredKey) {
  json doc = valid_document();
  doc["chunks"][3].erase("src");
  EXPECT_EQ(document_error(doc),
            "plan.json: chunks[3].src: expected the required key of a chunk, got nothing (the key is missing)");
}

TEST(PlanJsonErrors, MisspeltChunkKeyIsRejected) {
  json doc = valid_document();
  doc["chunks"][0]["dep"] = json::array();
  EXPECT_EQ(document_error(doc),
            "plan.json: chunks[0].dep: expected one of the chunk keys (id, tensor, box, dst_tensor, dst_box, src, dst, "
            "backend, op, stream, deps, group, runtime_rows), got an unknown key");
}

TEST(PlanJsonErrors, NegativeOrNonIntegerGroupIsRejected) {
  json doc = valid_document();
  doc["chunks"][5]["group"] = -1;
  EXPECT_EQ(document_error(doc),
            "plan.json: chunks[5].group: expected a group number >= 0 (leave the key out for no group), got -1");
  doc["chunks"][5]["group"] = "a";
  EXPECT_EQ(document_error(doc), R"(plan.json: chunks[5].group: expected an integer, got "a")");
}

TEST(PlanJsonErrors, MisspeltTopLevelKeyIsRejected) {
  json doc = valid_document();
  doc["world-size"] = 4;
  EXPECT_EQ(document_error(doc),
            "plan.json: world-size: expected one of the plan keys (version, collective, world_size, nodes, "
            "tensors, ranks, chunks), got an unknown key");
}

TEST(PlanJsonErrors, UnsupportedVersionSaysWhichIsSupported) {
  json doc = valid_document();
  doc["version"] = 2;
  EXPECT_EQ(document_error(doc),
            "plan.json: version: expected a supported plan format version (this build reads version 1), got 2");
  doc["version"] = "1";
  EXPECT_EQ(document_error(doc),
            R"(plan.json: version: expected a supported plan format version (this build reads version 1), got "1")");
  doc.erase("version");
  EXPECT_EQ(document_error(doc),
            "plan.json: version: expected the required key of a plan, got nothing (the key is missing)");
}

TEST(PlanJsonErrors, UnknownEnumSpellingsListTheChoices) {
  json doc = valid_document();
  doc["chunks"][2]["backend"] = "cuda";
  EXPECT_EQ(document_error(doc),
            R"(plan.json: chunks[2].backend: expected one of copy-engine, sm-copy, nccl, got "cuda")");
  doc = valid_document();
  doc["chunks"][5]["op"] = "reduce_add";
  EXPECT_EQ(document_error(doc), R"(plan.json: chunks[5].op: expected one of copy, reduce-add, got "reduce_add")");
  doc = valid_document();
  doc["collective"]["kind"] = "allgather";
  EXPECT_EQ(document_error(doc),
            "plan.json: collective.kind: expected one of all-gather, reduce-scatter, all-reduce, "
            "all-to-all, custom, got \"allgather\"");
  doc = valid_document();
  doc["tensors"]["x"]["dtype"] = "bfloat16";
  EXPECT_EQ(
      document_error(doc),
      R"(plan.json: tensors.x.dtype: expected one of f32, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64, got "bfloat16")");
}

TEST(PlanJsonErrors, NonIntegersAndOverflowingIntegers) {
  json doc = valid_document();
  doc["ranks"][1]["streams"][0][2] = -1.5;
  EXPECT_EQ(document_error(doc), "plan.json: ranks[1].streams[0][2]: expected an integer, got -1.5");
  doc = valid_document();
  doc["chunks"][0]["src"] = 3000000000LL;
  EXPECT_EQ(document_error(doc),
            "plan.json: chunks[0].src: expected an integer in [-2147483648, 2147483647], got 3000000000");
  doc = valid_document();
  doc["chunks"][7]["deps"] = json::array({true});
  EXPECT_EQ(document_error(doc), "plan.json: chunks[7].deps[0]: expected an integer, got true");
}

TEST(PlanJsonErrors, HugeNumbersInTheText) {
  std::string text = valid_document().dump();
  const std::string shape = R"("shape":[48,5])";
  const auto at = text.find(shape);
  ASSERT_NE(at, std::string::npos);
  std::string big = text;
  big.replace(at, shape.size(), R"("shape":[18446744073709551615,5])");
  EXPECT_EQ(parse_error(big),
            "plan.json: tensors.x.shape[0]: expected an integer that fits in 64 bits, got 18446744073709551615");
  big = text;
  big.replace(at, shape.size(), R"("shape":[1e30,5])");
  EXPECT_EQ(parse_error(big), "plan.json: tensors.x.shape[0]: expected an integer, got 1e+30");
  big = text;
  big.replace(at, shape.size(), R"("shape":[1e999,5])");
  EXPECT_NE(parse_error(big).find("plan.json: invalid JSON"), std::string::npos) << parse_error(big);
}

TEST(PlanJsonErrors, WrongContainerTypes) {
  json doc = valid_document();
  doc["ranks"] = json::object();
  EXPECT_EQ(document_error(doc), "plan.json: ranks: expected an array, got an object with 0 keys");
  doc = valid_document();
  doc["chunks"][1]["dst_box"] = json::array();
  EXPECT_EQ(document_error(doc), "plan.json: chunks[1].dst_box: expected a box object, got an array of 0 elements");
  doc = valid_document();
  doc["tensors"] = json::array({1, 2});
  EXPECT_EQ(document_error(doc),
            "plan.json: tensors: expected an object mapping tensor names to {shape, dtype, layout}, got an array of 2 "
            "elements");
  EXPECT_EQ(parse_error("[]"), "plan.json: (root): expected a plan object, got an array of 0 elements");
}

TEST(PlanJsonErrors, RepeatedKeysAreRejectedNotSilentlyOverwritten) {
  const CommPlan plan = parse_plan(valid_document().dump());
  const auto forward = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                                    [](const Chunk& c) { return c.deps == std::vector<int>{6}; });
  ASSERT_NE(forward, plan.chunks.end());
  std::string text = valid_document().dump();
  text.insert(text.find(R"("deps":[6])"), R"("deps":[],)");  // would silently drop the dep on 6
  EXPECT_EQ(parse_error(text),
            fmt::format("plan.json: chunks[{}].deps: expected each key once in an object, got it again", forward->id));
}

TEST(PlanJsonErrors, OddTensorNamesAreQuotedInThePath) {
  json doc = valid_document();
  doc["tensors"]["a.b"] = {{"dtype", "f32"}};
  EXPECT_EQ(
      document_error(doc),
      R"(plan.json: tensors["a.b"].shape: expected the required key of a tensor, got nothing (the key is missing))");
}

TEST(PlanJsonErrors, SyntaxErrorsGiveLineColumnAndByte) {
  const std::string text = "{\n  \"version\": 1,\n  oops\n}";
  const std::string message = parse_error(text);
  EXPECT_EQ(message.rfind("plan.json:3:3: invalid JSON at byte offset 20: syntax error", 0), 0u) << message;
  EXPECT_EQ(parse_error("").rfind("plan.json:1:1: invalid JSON at byte offset 0:", 0), 0u) << parse_error("");
}

TEST(PlanJsonErrors, BinaryJunkAndBadUtf8AreSyntaxErrorsWithPrintableMessages) {
  const std::string junk("\x89PNG\r\n\x1a\n\0\0\xff", 11);
  const std::string message = parse_error(junk);
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;
  for (char c : message) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unprintable byte in: " << message;
  EXPECT_NE(parse_error("{\"version\":1,\"collective\":{\"kind\":\"\xc3\x28\"}}").find("invalid JSON"),
            std::string::npos);
}

TEST(PlanJsonErrors, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(parse_error(deep), "plan.json: (root): expected a plan object, got an array of 1 element");
  json doc = valid_document();
  doc["chunks"][4]["deps"] = json::parse(std::string(1000, '[') + std::string(1000, ']'));
  EXPECT_EQ(document_error(doc), "plan.json: chunks[4].deps[0]: expected an integer, got an array of 1 element");
}

TEST(PlanJsonErrors, LongStringsAreCutInMessages) {
  json doc = valid_document();
  doc["chunks"][0]["op"] = std::string(10000, 'z');
  const std::string message = document_error(doc);
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(message.find("zzz...\""), std::string::npos) << message;
}

TEST(PlanJsonFiles, MissingFileAndDirectoryAreParseErrorsNamingThePath) {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    load_plan(dir);
    FAIL() << "a directory loaded";
  } catch (const PlanParseError& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": expected a plan file, got a directory");
  }
  const auto missing = dir / "syncopate-no-such-plan.json";
  try {
    load_plan(missing);
    FAIL() << "a missing file loaded";
  } catch (const PlanParseError& e) {
    EXPECT_EQ(std::string(e.what()), missing.string() + ": cannot open the plan file: No such file or directory");
  }
}

TEST(PlanJsonFiles, DevicesAreRefusedRatherThanReadForever) {
  try {
    load_plan("/dev/zero");
    FAIL() << "/dev/zero loaded";
  } catch (const PlanParseError& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero: expected a plan file, got a device or socket");
  }
}

TEST(PlanJsonFiles, SaveThenLoadGivesThePlanBack) {
  const CommPlan plan = make_plan(options(Collective::all_reduce, Algorithm::bidir, 3, 2));
  const auto path = std::filesystem::temp_directory_path() / "syncopate-json-test-plan.json";
  save_plan(plan, path);
  EXPECT_EQ(load_plan(path), plan);
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------- golden plans

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Each golden file records the options that made it (collective, world, tensor, backend), so
// the test remakes the plan from the file and diffs the text. Regenerate them with
// scripts/regen_golden_plans.sh after an intended change.
TEST(GoldenPlans, TemplatesStillMakeTheGoldenFiles) {
  const std::filesystem::path dir = std::filesystem::path(SYNCOPATE_SOURCE_DIR) / "tests/golden/plans";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const std::string golden = read_text(entry.path());
    const CommPlan recorded = parse_plan(golden, entry.path().filename().string());
    TemplateOptions o;
    o.collective = recorded.collective.kind;
    o.algorithm = recorded.collective.algorithm;
    o.split = recorded.collective.split;
    o.dim = recorded.collective.dim;
    o.world_size = recorded.world_size;
    o.tensor = recorded.collective.tensor;
    if (!recorded.collective.output.empty()) o.output = recorded.collective.output;
    o.shape = recorded.tensors.at(o.tensor).shape;
    o.dtype = recorded.tensors.at(o.tensor).dtype;
    if (!recorded.chunks.empty()) o.backend = recorded.chunks.front().backend;
    EXPECT_EQ(plan_to_json(make_plan(o)), golden) << entry.path() << " differs; rerun scripts/regen_golden_plans.sh";
    ++checked;
  }
  EXPECT_GE(checked, 5) << "golden plans missing from " << dir;
}

}  // namespace
}  // namespace syncopate::plan
