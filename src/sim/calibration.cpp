// Reading and writing calibration files with checked access: every failure names the JSON path.
#include "syncopate/sim/calibration.hpp"

#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/json_checked.hpp"

namespace syncopate::sim {
namespace {

using checked_json::ErrorClass;
using checked_json::JsonNode;
using checked_json::ObjectReader;
using nlohmann::json;

// A value of the document (the checked JSON reader's node, failing with CalibrationError) with
// the calibration's number rules.
class Node {
 public:
  explicit Node(JsonNode node) : node_(std::move(node)) {}
  Node(const json& v, std::string path, std::string_view source)
      : node_(v, std::move(path), source, ErrorClass::calibration) {}

  [[noreturn]] void fail(std::string_view expected) const { node_.fail(expected); }
  const JsonNode& node() const { return node_; }
  const json& value() const { return node_.value(); }
  const std::string& path() const { return node_.path(); }

  double positive() const {
    if (!value().is_number() || value().get<double>() <= 0) fail("a number > 0");
    return value().get<double>();
  }
  double non_negative() const {
    if (!value().is_number() || value().get<double>() < 0) fail("a number >= 0");
    return value().get<double>();
  }
  double at_least_one() const {
    if (!value().is_number() || value().get<double>() < 1) fail("a number >= 1");
    return value().get<double>();
  }
  double fraction() const {
    if (!value().is_number() || value().get<double>() <= 0 || value().get<double>() > 1) fail("a number in (0, 1]");
    return value().get<double>();
  }
  int integer(int min_value) const {
    if (!value().is_number_integer() || value().get<std::int64_t>() < min_value ||
        value().get<std::int64_t>() > (1 << 30))
      fail(fmt::format("an integer >= {}", min_value));
    return static_cast<int>(value().get<std::int64_t>());
  }
  std::string text() const { return node_.as_string(); }
  template <class E>
  E enumerated() const {
    if (value().is_string())
      if (auto e = plan::parse_enum<E>(value().get<std::string>())) return *e;
    fail("one of " + plan::enum_choices<E>());
  }

 private:
  JsonNode node_;
};

// The fields of one object (`what` names it in messages): unknown keys are refused at once, so a
// misspelt optional field cannot pass silently.
class Object {
 public:
  Object(const Node& node, std::string_view what, std::initializer_list<std::string_view> keys)
      : reader_(node.node(), what, keys) {
    reader_.finish();
  }
  Node required(std::string_view key) { return Node(reader_.required(key)); }
  std::optional<Node> optional(std::string_view key) {
    if (auto found = reader_.optional(key)) return Node(*found);
    return std::nullopt;
  }

 private:
  ObjectReader reader_;
};

Object object(const Node& node, std::string_view what, std::initializer_list<std::string_view> keys) {
  return Object(node, what, keys);
}

BackendModel read_backend(const Node& node) {
  auto o = object(node, "backend",
                  {"bandwidth_gbps", "latency_us", "signal_latency_us", "concurrency", "sms", "compute_slowdown",
                   "bandwidth_under_compute_gbps", "issue_us"});
  BackendModel b;
  b.bandwidth_gbps = o.required("bandwidth_gbps").positive();
  b.latency_us = o.required("latency_us").non_negative();
  b.signal_latency_us = o.required("signal_latency_us").non_negative();
  b.concurrency = o.required("concurrency").integer(1);
  b.sms = o.required("sms").integer(0);
  b.compute_slowdown = o.required("compute_slowdown").at_least_one();
  if (auto v = o.optional("bandwidth_under_compute_gbps")) b.bandwidth_under_compute_gbps = v->positive();
  if (auto v = o.optional("issue_us")) b.issue_us = v->non_negative();
  return b;
}

}  // namespace

double Calibration::link_bandwidth_gbps(int src, int dst, plan::Backend b) const {
  for (const auto& link : links)
    if (link.src == src && link.dst == dst && link.backend == b) return link.bandwidth_gbps;
  if (src == dst) return local_copy_gbps;
  return backend(b).bandwidth_gbps;
}

double Calibration::link_bandwidth_under_compute_gbps(int src, int dst, plan::Backend b) const {
  const double alone = link_bandwidth_gbps(src, dst, b);
  if (src == dst) return alone;
  const auto& m = backend(b);
  return alone * (m.bandwidth_under_compute() / m.bandwidth_gbps);
}

double Calibration::tile_time_us(std::int64_t block_m, std::int64_t block_n, std::int64_t k, plan::DType dtype) const {
  const double flops = 2.0 * static_cast<double>(block_m) * static_cast<double>(block_n) * static_cast<double>(k);
  const bool fp8 = dtype == plan::DType::f8e4m3 || dtype == plan::DType::f8e5m2;
  const double peak = fp8 ? gemm.fp8_peak_tflops : gemm.peak_tflops;
  const double per_sm_flops_per_us = peak * 1e6 / sms * gemm.mma_efficiency;
  return gemm.tile_overhead_us + flops / per_sm_flops_per_us;
}

Calibration parse_calibration(std::string_view json_text, std::string_view source) {
  const json doc = checked_json::parse_json_source(json_text, source, ErrorClass::calibration);
  const Node root(doc, "", source);
  auto top = object(root, "calibration",
                    {"version", "device", "sources", "gpu", "gemm", "overheads", "host", "kernel_level", "reduce_add",
                     "network", "attention", "backends", "links"});
  Calibration c;
  c.version = top.required("version").integer(1);
  if (c.version != kCalibrationVersion)
    top.required("version").fail(fmt::format("version {} (the one this build reads)", kCalibrationVersion));
  c.device = top.required("device").text();
  if (auto sources = top.optional("sources")) {
    // Free text saying where each number comes from: an object of strings, nothing else.
    if (!sources->value().is_object()) sources->fail("an object of strings");
    for (const auto& [key, value] : sources->value().items())
      Node(value, checked_json::path_join(sources->path(), key), source).text();
  }

  auto gpu = object(top.required("gpu"), "gpu", {"sms", "egress_gbps", "ingress_gbps", "local_copy_gbps"});
  c.sms = gpu.required("sms").integer(1);
  c.egress_gbps = gpu.required("egress_gbps").positive();
  c.ingress_gbps = gpu.required("ingress_gbps").positive();
  c.local_copy_gbps = gpu.required("local_copy_gbps").positive();

  auto gemm = object(top.required("gemm"), "gemm", {"peak_tflops", "mma_efficiency", "tile_overhead_us", "fp8"});
  c.gemm.peak_tflops = gemm.required("peak_tflops").positive();
  c.gemm.mma_efficiency = gemm.required("mma_efficiency").fraction();
  c.gemm.tile_overhead_us = gemm.required("tile_overhead_us").non_negative();
  c.gemm.fp8_peak_tflops = 2 * c.gemm.peak_tflops;
  c.gemm.fp8_estimated = true;
  if (auto fp8 = gemm.optional("fp8")) {
    auto o = object(*fp8, "gemm.fp8", {"peak_tflops", "estimated"});
    c.gemm.fp8_peak_tflops = o.required("peak_tflops").positive();
    const Node estimated = o.required("estimated");
    if (!estimated.value().is_boolean()) estimated.fail("true (not measured yet) or false");
    c.gemm.fp8_estimated = estimated.value().get<bool>();
  }

  const Node overheads_node = top.required("overheads");
  if (overheads_node.value().is_object() && overheads_node.value().contains("fused_call_us"))
    // Removed, not ignored: the lump (100 / 300 / 700 us) was charged to every fused call, so a
    // file that still carries it was measured with it, and reading it without would predict
    // fused calls that much faster than the file's measurements (and tip the auto choice).
    throw CalibrationError(
        fmt::format("{}: overheads.fused_call_us: removed: a per-collective lump is no longer read; the call "
                    "path is modelled by `host` (fused_call_us, after_launch_us, producer_after_launch_us), "
                    "the reduce-add step and the copy-out (docs/SIMULATOR.md): measure those "
                    "(bench/bench_call_path.py) and remove overheads.fused_call_us",
                    source));
  auto overheads = object(overheads_node, "overheads", {"launch_us", "sync_us"});
  c.launch_overhead_us = overheads.required("launch_us").non_negative();
  c.sync_overhead_us = overheads.required("sync_us").non_negative();
  const auto host = top.optional("host");

  if (host) {
    auto o = object(*host, "host",
                    {"fused_call_us", "after_launch_us", "producer_after_launch_us", "chunks_after_launch_us"});
    c.host.modelled = true;
    c.host.fused_call_us = o.required("fused_call_us").non_negative();
    c.host.after_launch_us = o.required("after_launch_us").non_negative();
    c.host.producer_after_launch_us = o.required("producer_after_launch_us").non_negative();
    if (auto v = o.optional("chunks_after_launch_us")) c.host.chunks_after_launch_us = v->non_negative();
  }
  if (auto kl = top.optional("kernel_level")) {
    auto o =
        object(*kl, "kernel_level", {"call_us", "collective_us", "gemm_us", "chunk_latency_us", "carveout_slowdown"});
    c.kernel_level.call_us = o.required("call_us").non_negative();
    c.kernel_level.collective_us = o.required("collective_us").non_negative();
    c.kernel_level.gemm_us = o.required("gemm_us").non_negative();
    c.kernel_level.chunk_latency_us = o.required("chunk_latency_us").non_negative();
    c.kernel_level.carveout_slowdown = o.required("carveout_slowdown").at_least_one();
  }
  if (auto add = top.optional("reduce_add")) {
    auto o = object(*add, "reduce_add", {"add_gbps", "add_under_compute_gbps"});
    c.reduce_add.add_gbps = o.required("add_gbps").positive();
    c.reduce_add.add_under_compute_gbps = o.required("add_under_compute_gbps").positive();
  }
  if (auto net = top.optional("network")) {
    auto o = object(*net, "network", {"bandwidth_gbps", "latency_us", "estimated"});
    c.network.modelled = true;
    c.network.bandwidth_gbps = o.required("bandwidth_gbps").positive();
    c.network.latency_us = o.required("latency_us").non_negative();
    const Node estimated = o.required("estimated");
    if (!estimated.value().is_boolean()) estimated.fail("true (numbers not measured yet) or false");
    c.network.estimated = estimated.value().get<bool>();
  }

  if (auto att = top.optional("attention")) {
    auto o = object(*att, "attention",
                    {"library_tflops", "library_causal_tflops", "kernel_tflops", "kernel_causal_tflops",
                     "wait_overhead", "wait_overhead_causal", "merge_gbps", "estimated"});
    auto& a = c.attention;
    a.modelled = true;
    a.library_tflops = o.required("library_tflops").positive();
    a.library_causal_tflops = o.required("library_causal_tflops").positive();
    a.kernel_tflops = o.required("kernel_tflops").positive();
    a.kernel_causal_tflops = o.required("kernel_causal_tflops").positive();
    a.wait_overhead = o.required("wait_overhead").positive();
    a.wait_overhead_causal = o.required("wait_overhead_causal").positive();
    a.merge_gbps = o.required("merge_gbps").positive();
    const Node estimated = o.required("estimated");
    if (!estimated.value().is_boolean()) estimated.fail("true (numbers not measured yet) or false");
    a.estimated = estimated.value().get<bool>();
  }

  const Node backends_node = top.required("backends");
  std::vector<std::string_view> names;
  for (const auto& [b, name] : plan::EnumTable<plan::Backend>::entries) names.push_back(name);
  auto backends = object(backends_node, "backends", {names[0], names[1], names[2]});
  static_assert(plan::EnumTable<plan::Backend>::entries.size() == 3);
  for (const auto& [b, name] : plan::EnumTable<plan::Backend>::entries)
    c.backends.at(static_cast<std::size_t>(b)) = read_backend(backends.required(name));
  for (const auto& b : c.backends)
    if (b.sms >= c.sms)
      throw CalibrationError(fmt::format(
          "{}: backends: a backend takes {} SMs, but gpu.sms is {}: nothing left for compute", source, b.sms, c.sms));

  if (auto links = top.optional("links")) {
    if (!links->value().is_array()) links->fail("an array of links");
    for (std::size_t i = 0; i < links->value().size(); ++i) {
      const Node item(links->value()[i], fmt::format("{}[{}]", links->path(), i), source);
      auto o = object(item, "link", {"src", "dst", "backend", "bandwidth_gbps"});
      LinkOverride l;
      l.src = o.required("src").integer(0);
      l.dst = o.required("dst").integer(0);
      l.backend = o.required("backend").enumerated<plan::Backend>();
      l.bandwidth_gbps = o.required("bandwidth_gbps").positive();
      c.links.push_back(l);
    }
  }
  return c;
}

Calibration load_calibration(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw CalibrationError(fmt::format("{}: cannot open calibration file", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return parse_calibration(text.str(), path.filename().string());
}

std::string calibration_to_json(const Calibration& c, int indent) {
  json doc;
  doc["version"] = c.version;
  doc["device"] = c.device;
  doc["gpu"] = {{"sms", c.sms},
                {"egress_gbps", c.egress_gbps},
                {"ingress_gbps", c.ingress_gbps},
                {"local_copy_gbps", c.local_copy_gbps}};
  doc["gemm"] = {{"peak_tflops", c.gemm.peak_tflops},
                 {"mma_efficiency", c.gemm.mma_efficiency},
                 {"tile_overhead_us", c.gemm.tile_overhead_us},
                 {"fp8", {{"peak_tflops", c.gemm.fp8_peak_tflops}, {"estimated", c.gemm.fp8_estimated}}}};
  doc["overheads"] = {{"launch_us", c.launch_overhead_us}, {"sync_us", c.sync_overhead_us}};
  if (c.host.modelled) {
    doc["host"] = {{"fused_call_us", c.host.fused_call_us},
                   {"after_launch_us", c.host.after_launch_us},
                   {"producer_after_launch_us", c.host.producer_after_launch_us}};
    if (c.host.chunks_after_launch_us > 0) doc["host"]["chunks_after_launch_us"] = c.host.chunks_after_launch_us;
  }
  const auto& kl = c.kernel_level;
  if (kl.call_us > 0 || kl.collective_us > 0 || kl.gemm_us > 0 || kl.chunk_latency_us > 0 || kl.carveout_slowdown != 1)
    doc["kernel_level"] = {{"call_us", kl.call_us},
                           {"collective_us", kl.collective_us},
                           {"gemm_us", kl.gemm_us},
                           {"chunk_latency_us", kl.chunk_latency_us},
                           {"carveout_slowdown", kl.carveout_slowdown}};
  if (c.reduce_add.add_gbps > 0)
    doc["reduce_add"] = {{"add_gbps", c.reduce_add.add_gbps},
                         {"add_under_compute_gbps", c.reduce_add.add_under_compute_gbps}};
  if (c.network.modelled)
    doc["network"] = {{"bandwidth_gbps", c.network.bandwidth_gbps},
                      {"latency_us", c.network.latency_us},
                      {"estimated", c.network.estimated}};
  if (const auto& a = c.attention; a.modelled)
    doc["attention"] = {{"library_tflops", a.library_tflops}, {"library_causal_tflops", a.library_causal_tflops},
                        {"kernel_tflops", a.kernel_tflops},   {"kernel_causal_tflops", a.kernel_causal_tflops},
                        {"wait_overhead", a.wait_overhead},   {"wait_overhead_causal", a.wait_overhead_causal},
                        {"merge_gbps", a.merge_gbps},         {"estimated", a.estimated}};
  for (const auto& [b, name] : plan::EnumTable<plan::Backend>::entries) {
    const auto& m = c.backend(b);
    doc["backends"][std::string(name)] = {{"bandwidth_gbps", m.bandwidth_gbps},
                                          {"latency_us", m.latency_us},
                                          {"signal_latency_us", m.signal_latency_us},
                                          {"concurrency", m.concurrency},
                                          {"sms", m.sms},
                                          {"compute_slowdown", m.compute_slowdown}};
    if (m.bandwidth_under_compute_gbps > 0)
      doc["backends"][std::string(name)]["bandwidth_under_compute_gbps"] = m.bandwidth_under_compute_gbps;
    if (m.issue_us > 0) doc["backends"][std::string(name)]["issue_us"] = m.issue_us;
  }
  if (!c.links.empty()) {
    doc["links"] = json::array();
    for (const auto& l : c.links)
      doc["links"].push_back({{"src", l.src},
                              {"dst", l.dst},
                              {"backend", std::string(plan::to_string(l.backend))},
                              {"bandwidth_gbps", l.bandwidth_gbps}});
  }
  return doc.dump(indent);
}

}  // namespace syncopate::sim
