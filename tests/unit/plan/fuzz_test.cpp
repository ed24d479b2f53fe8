// A seeded random mutator over plan JSON: template plans and the good/bad plan files are mutated
// (numbers nudged or made extreme, types swapped, keys dropped, array entries duplicated or
// shuffled, text truncated, random bytes) and fed to parse_plan, then verify. A run passes when
// every input ends in a PlanParseError or a report: no other exception, no crash, no hang.
//
// Bounded by SYNCOPATE_FUZZ_SECONDS (default 20) and SYNCOPATE_FUZZ_ITERATIONS (default
// 1,000,000). Iteration i uses seed base + i; a failure prints that seed, and
// SYNCOPATE_FUZZ_SEED=<seed> SYNCOPATE_FUZZ_ITERATIONS=1 replays exactly that input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 10);
}

std::vector<std::string> seed_corpus() {
  std::vector<std::string> corpus;
  // Small template plans of every kind, so mutations hit every collective's rules.
  for (auto kind : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir}) {
      TemplateOptions o;
      o.collective = kind;
      o.algorithm = algo;
      o.world_size = kind == Collective::all_reduce ? 2 : 3;
      o.split = algo == Algorithm::direct ? 2 : 1;
      o.shape = {6, 4};
      o.backend = algo == Algorithm::bidir ? Backend::nccl : Backend::copy_engine;
      corpus.push_back(plan_to_json(make_plan(o)));
    }
  const fs::path dir = fs::path(SYNCOPATE_SOURCE_DIR) / "tests/unit/plan";
  for (const char* kind : {"good", "bad"}) {
    if (!fs::exists(dir / kind)) continue;
    for (const auto& entry : fs::directory_iterator(dir / kind)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      corpus.push_back(text.str());
    }
  }
  return corpus;
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  // `seed_doc` is `seed_text` parsed (discarded when it is not JSON).
  std::string mutate(const std::string& seed_text, const json& seed_doc) {
    const int rounds = pick(1, 4);
    json doc = seed_doc;
    std::string text = seed_text;
    bool text_current = true;
    for (int i = 0; i < rounds; ++i) {
      if (!doc.is_discarded() && pick(0, 9) < 9) {
        mutate_structure(doc);
        text_current = false;
      } else {
        if (!text_current) text = doc.dump();
        mutate_text(text);
        doc = json::parse(text, nullptr, false);
        text_current = true;
      }
    }
    return text_current ? text : doc.dump();
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  // A random index into something of `size` > 0 entries.
  std::size_t index(std::size_t size) { return std::uniform_int_distribution<std::size_t>(0, size - 1)(rng_); }

  static void collect(json& node, std::vector<json*>& out) {
    out.push_back(&node);
    if (node.is_object() || node.is_array())
      for (auto& child : node) collect(child, out);
  }

  json extreme_number() {
    switch (pick(0, 8)) {
      case 0:
        return 0;
      case 1:
        return -1;
      case 2:
        return std::numeric_limits<std::int64_t>::max();
      case 3:
        return std::numeric_limits<std::int64_t>::min();
      case 4:
        return std::numeric_limits<std::uint64_t>::max();
      case 5:
        return 2147483648LL;
      case 6:
        return 1e300;
      case 7:
        return 0.5;
      default:
        return pick(-3, 70);
    }
  }

  json other_type() {
    switch (pick(0, 5)) {
      case 0:
        return nullptr;
      case 1:
        return "x";
      case 2:
        return true;
      case 3:
        return json::array({1, 2});
      case 4:
        return json::object({{"k", 1}});
      default:
        return extreme_number();
    }
  }

  void mutate_structure(json& doc) {
    std::vector<json*> nodes;
    collect(doc, nodes);
    // Half of the mutations nudge an integer: they keep the plan loadable and so reach the
    // verifier's rules rather than the loader's type checks.
    if (pick(0, 1) == 0) {
      std::vector<json*> integers;
      for (json* n : nodes)
        if (n->is_number_integer()) integers.push_back(n);
      if (!integers.empty()) {
        json& node = *integers[index(integers.size())];
        const auto v = node.get<std::int64_t>();
        const int how = pick(0, 3);
        constexpr auto lo = std::numeric_limits<std::int64_t>::min();
        constexpr auto hi = std::numeric_limits<std::int64_t>::max();
        if (how == 0)
          node = v == hi ? v : v + 1;
        else if (how == 1)
          node = v == lo ? v : v - 1;
        else
          node = how == 2 ? json(0) : extreme_number();
        return;
      }
    }
    json& node = *nodes[index(nodes.size())];
    switch (pick(0, 7)) {
      case 0:  // a number where anything was
        node = extreme_number();
        break;
      case 1:  // swap the type
        node = other_type();
        break;
      case 2:  // drop a key or an entry
        if (node.is_object() && !node.empty()) {
          auto it = node.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(index(node.size())));
          node.erase(it.key());
        } else if (node.is_array() && !node.empty()) {
          node.erase(index(node.size()));
        }
        break;
      case 3:  // duplicate an entry
        if (node.is_array() && !node.empty() && node.size() < 4096) node.push_back(node[index(node.size())]);
        break;
      case 4:  // shuffle
        if (node.is_array()) {
          std::vector<json> items(node.begin(), node.end());
          std::shuffle(items.begin(), items.end(), rng_);
          node = json(items);
        }
        break;
      case 5:  // a string becomes another known or unknown name
        if (node.is_string()) {
          static const char* names[] = {"x",          "y",      "z",          "",    "nccl",   "copy",
                                        "reduce-add", "custom", "all-to-all", "f32", "sm-copy"};
          node = names[pick(0, 10)];
        } else {
          node = other_type();
        }
        break;
      case 6:  // an unknown key
        if (node.is_object()) node["surprise"] = 1;
        break;
      default:  // copy one node over another (e.g. a box of another chunk, a shape)
        node = *nodes[index(nodes.size())];
        break;
    }
  }

  void mutate_text(std::string& text) {
    if (text.empty()) {
      text = "{";
      return;
    }
    const auto at = index(text.size());
    switch (pick(0, 3)) {
      case 0:
        text.resize(at);
        break;  // truncate
      case 1:
        text[at] = static_cast<char>(pick(0, 255));
        break;
      case 2:
        text.insert(at, std::string(static_cast<std::size_t>(pick(1, 8)), static_cast<char>(pick(0, 255))));
        break;
      default:
        text.erase(at, static_cast<std::size_t>(pick(1, 16)));
        break;
    }
  }

  std::mt19937_64 rng_;
};

enum class Outcome { parse_error, verified, violations };

// Everything a plan goes through after loading: verify, the graph algorithms, and a save/load
// round trip. Throws whatever escapes.
Outcome run_one(const std::string& text) {
  CommPlan plan;
  try {
    plan = parse_plan(text, "fuzz.json");
  } catch (const PlanParseError&) {
    return Outcome::parse_error;
  }
  const VerifyReport report = verify(plan);
  (void)report.format("fuzz.json");
  const DependencyGraph graph(plan);
  (void)graph.topological_order();
  (void)graph.find_cycle();
  try {
    verify_or_throw(plan, "fuzz.json");
  } catch (const PlanVerifyError&) {
  }
  return report.ok() ? Outcome::verified : Outcome::violations;
}

TEST(PlanFuzz, LoaderAndVerifierNeverCrashOnMutatedPlans) {
  const auto corpus = seed_corpus();
  ASSERT_GT(corpus.size(), 20u);
  std::vector<json> parsed;
  for (const auto& text : corpus) parsed.push_back(json::parse(text, nullptr, false));
  const std::uint64_t base = env_number(
      "SYNCOPATE_FUZZ_SEED", static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  const double seconds = static_cast<double>(env_number("SYNCOPATE_FUZZ_SECONDS", 20));
  const std::uint64_t max_iterations = env_number("SYNCOPATE_FUZZ_ITERATIONS", 1'000'000);
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t iterations = 0, parse_errors = 0, verified = 0, violations = 0;
  for (; iterations < max_iterations; ++iterations) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    const std::uint64_t seed = base + iterations;
    std::mt19937_64 chooser(seed);
    const std::size_t pick = chooser() % corpus.size();
    const std::string text = Mutator(seed).mutate(corpus[pick], parsed[pick]);
    try {
      switch (run_one(text)) {
        case Outcome::parse_error:
          ++parse_errors;
          break;
        case Outcome::verified:
          ++verified;
          break;
        case Outcome::violations:
          ++violations;
          break;
      }
    } catch (const std::exception& e) {
      FAIL() << "seed " << seed << " (replay: SYNCOPATE_FUZZ_SEED=" << seed
             << " SYNCOPATE_FUZZ_ITERATIONS=1): unexpected exception: " << e.what() << "\ninput (first 2000 bytes):\n"
             << text.substr(0, 2000);
    }
  }
  RecordProperty("iterations", static_cast<int>(iterations));
  RecordProperty("base_seed", fmt::to_string(base));
  std::printf("fuzz: base seed %s, %s inputs: %s parse errors, %s verified, %s with violations\n",
              fmt::to_string(base).c_str(), fmt::to_string(iterations).c_str(), fmt::to_string(parse_errors).c_str(),
              fmt::to_string(verified).c_str(), fmt::to_string(violations).c_str());
  // The mutator must reach all three outcomes, or it is not testing the verifier at all.
  if (iterations >= 2000) {
    EXPECT_GT(parse_errors, 0u);
    EXPECT_GT(verified, 0u);
    EXPECT_GT(violations, 0u);
  }
}

// The good seed files verify, so the corpus starts from valid plans as well as broken ones.
TEST(PlanFuzz, SeedCorpusBehaves) {
  const fs::path dir = fs::path(SYNCOPATE_SOURCE_DIR) / "tests/unit/plan";
  for (const auto& entry : fs::directory_iterator(dir / "good"))
    EXPECT_EQ(run_one([&] {
                std::ifstream in(entry.path());
                std::stringstream s;
                s << in.rdbuf();
                return s.str();
              }()),
              Outcome::verified)
        << entry.path();
}

}  // namespace
}  // namespace syncopate::plan
