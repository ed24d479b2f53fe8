// Plans as versioned JSON: the reader, the writer and file I/O.
//
// The reader only checks what it must to build a CommPlan (syntax, types, known keys, the
// version); ranges and bounds are the verifier's job. It never sizes anything from a number in
// the input, so a hostile file costs at most memory proportional to its own size.
#include "syncopate/plan/json.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_checked.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan {
namespace {

// A plan of a million chunks is about 200 MB of JSON; the parsed document takes several times
// the text, so a larger input is refused before it can exhaust memory.
constexpr std::size_t kMaxPlanFileBytes = std::size_t{1} << 30;

using detail::as_enum;
using detail::JsonNode;
using detail::ObjectReader;
using nlohmann::json;

// ---------------------------------------------------------------- reading

Box read_box(const JsonNode& node) {
  ObjectReader fields(node, "box", {"offset", "extent"});
  Box box;
  box.offset = fields.required("offset").as_int64_list();
  box.extent = fields.required("extent").as_int64_list();
  fields.finish();
  return box;
}

CollectiveSpec read_collective(const JsonNode& node) {
  ObjectReader fields(node, "collective", {"kind", "tensor", "output", "input", "dim", "algorithm", "split"});
  CollectiveSpec spec;
  spec.kind = as_enum<Collective>(fields.required("kind"));
  if (auto v = fields.optional("tensor")) spec.tensor = v->as_string();
  if (auto v = fields.optional("output")) spec.output = v->as_string();
  if (auto v = fields.optional("input")) spec.input = v->as_string();
  if (auto v = fields.optional("dim")) spec.dim = v->as_int();
  if (auto v = fields.optional("algorithm")) spec.algorithm = as_enum<Algorithm>(*v);
  if (auto v = fields.optional("split")) spec.split = v->as_int();
  fields.finish();
  return spec;
}

TensorSpec read_tensor(const JsonNode& node) {
  ObjectReader fields(node, "tensor", {"shape", "dtype", "layout"});
  TensorSpec spec;
  spec.shape = fields.required("shape").as_int64_list();
  spec.dtype = as_enum<DType>(fields.required("dtype"));
  if (auto v = fields.optional("layout")) spec.layout = v->as_string();
  fields.finish();
  return spec;
}

// Ranges (dim inside the box, index inside `counts`, its dtype) are the verifier's.
RuntimeRows read_runtime_rows(const JsonNode& node) {
  ObjectReader fields(node, "runtime_rows", {"dim", "counts", "index"});
  RuntimeRows rows;
  rows.dim = fields.required("dim").as_int();
  rows.counts = fields.required("counts").as_string();
  rows.index = fields.required("index").as_int64();
  fields.finish();
  return rows;
}

RankProgram read_rank(const JsonNode& node) {
  ObjectReader fields(node, "rank", {"rank", "streams"});
  RankProgram program;
  program.rank = fields.required("rank").as_int();
  for (const auto& stream : fields.required("streams").elements()) program.streams.push_back(stream.as_int_list());
  fields.finish();
  return program;
}

Chunk read_chunk(const JsonNode& node) {
  ObjectReader fields(node, "chunk",
                      {"id", "tensor", "box", "dst_tensor", "dst_box", "src", "dst", "backend", "op", "stream", "deps",
                       "group", "runtime_rows"});
  Chunk chunk;
  chunk.id = fields.required("id").as_int();
  chunk.tensor = fields.required("tensor").as_string();
  chunk.box = read_box(fields.required("box"));
  auto dst_tensor = fields.optional("dst_tensor");
  chunk.dst_tensor = dst_tensor ? dst_tensor->as_string() : chunk.tensor;
  auto dst_box = fields.optional("dst_box");
  chunk.dst_box = dst_box ? read_box(*dst_box) : chunk.box;
  chunk.src = fields.required("src").as_int();
  chunk.dst = fields.required("dst").as_int();
  chunk.backend = as_enum<Backend>(fields.required("backend"));
  chunk.op = as_enum<ChunkOp>(fields.required("op"));
  chunk.stream = fields.required("stream").as_int();
  if (auto deps = fields.optional("deps")) chunk.deps = deps->as_int_list();
  if (auto group = fields.optional("group")) {
    chunk.group = group->as_int();
    // Absent means "no group"; a written group number is a name, never negative.
    if (chunk.group < 0) group->fail("a group number >= 0 (leave the key out for no group)");
  }
  if (auto rows = fields.optional("runtime_rows")) chunk.runtime_rows = read_runtime_rows(*rows);
  fields.finish();
  return chunk;
}

// Reads the version before anything else, so a plan from a newer format gets a message
// about versions rather than about whichever field changed.
void check_version(ObjectReader& root) {
  const JsonNode version = root.required("version");
  if (!version.value().is_number_integer() || version.value().get<std::int64_t>() != kPlanVersion)
    version.fail(fmt::format("a supported plan format version (this build reads version {})", kPlanVersion));
}

CommPlan read_plan(const JsonNode& root_node) {
  ObjectReader root(root_node, "plan", {"version", "collective", "world_size", "nodes", "tensors", "ranks", "chunks"});
  check_version(root);
  CommPlan plan;
  plan.collective = read_collective(root.required("collective"));
  plan.world_size = root.required("world_size").as_int();
  // Absent: all ranks on one node. Ranges (one entry per rank, ids >= 0) are the verifier's.
  if (auto v = root.optional("nodes")) {
    for (std::int64_t node : v->as_int64_list()) {
      if (node < 0 || node > std::numeric_limits<int>::max()) v->fail("a list of node ids >= 0, one per rank");
      plan.nodes.push_back(static_cast<int>(node));
    }
  }
  const JsonNode tensors = root.required("tensors");
  if (!tensors.value().is_object()) tensors.fail("an object mapping tensor names to {shape, dtype, layout}");
  for (const auto& item : tensors.value().items())
    plan.tensors.emplace(item.key(), read_tensor(tensors.child(item.key())));
  for (const auto& rank : root.required("ranks").elements()) plan.ranks.push_back(read_rank(rank));
  for (const auto& chunk : root.required("chunks").elements()) plan.chunks.push_back(read_chunk(chunk));
  root.finish();
  return plan;
}

// Parse errors quote the bytes last read; keep the message printable whatever the input was.
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

[[noreturn]] void throw_syntax_error(std::string_view text, std::string_view source, const json::parse_error& e) {
  // e.byte counts from 1 and points at the last byte read; clamp it for the empty input.
  const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n')
      ++line, column = 1;
    else
      ++column;
  }
  std::string detail = e.what();
  // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
  if (auto colon = detail.find(": ", detail.find(']')); colon != std::string::npos) detail = detail.substr(colon + 2);
  throw PlanParseError(
      fmt::format("{}:{}:{}: invalid JSON at byte offset {}: {}", source, line, column, at, printable(detail)));
}

// ---------------------------------------------------------------- writing
//
// Written with fmt rather than through a JSON DOM: plans have hundreds of thousands of chunks
// at large world sizes. The output is the compact JSON nlohmann would print for each value.

// A JSON string literal; invalid UTF-8 is replaced rather than thrown on.
std::string quote(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

template <class T>
std::string list(const std::vector<T>& values) {
  return fmt::format("[{}]", fmt::join(values, ","));
}

std::string box_json(const Box& box) {
  return fmt::format(R"({{"offset":{},"extent":{}}})", list(box.offset), list(box.extent));
}

std::string collective_json(const CollectiveSpec& spec) {
  std::string output = spec.output.empty() ? "" : fmt::format(R"("output":{},)", quote(spec.output));
  std::string input = spec.input.empty() ? "" : fmt::format(R"("input":{},)", quote(spec.input));
  return fmt::format(R"({{"kind":"{}","tensor":{},{}{}"dim":{},"algorithm":"{}","split":{}}})", to_string(spec.kind),
                     quote(spec.tensor), output, input, spec.dim, to_string(spec.algorithm), spec.split);
}

std::string tensors_json(const std::map<std::string, TensorSpec>& tensors) {
  std::vector<std::string> items;
  for (const auto& [name, spec] : tensors)
    items.push_back(fmt::format(R"({}:{{"shape":{},"dtype":"{}","layout":{}}})", quote(name), list(spec.shape),
                                to_string(spec.dtype), quote(spec.layout)));
  return fmt::format("{{{}}}", fmt::join(items, ","));
}

std::string rank_json(const RankProgram& program) {
  std::vector<std::string> streams;
  for (const auto& stream : program.streams) streams.push_back(list(stream));
  return fmt::format(R"({{"rank":{},"streams":[{}]}})", program.rank, fmt::join(streams, ","));
}

std::string chunk_json(const Chunk& chunk) {
  std::string out =
      fmt::format(R"({{"id":{},"tensor":{},"box":{},)", chunk.id, quote(chunk.tensor), box_json(chunk.box));
  // The common case (same tensor and box on both sides) stays short; the reader fills them in.
  if (chunk.dst_tensor != chunk.tensor) out += fmt::format(R"("dst_tensor":{},)", quote(chunk.dst_tensor));
  if (chunk.dst_box != chunk.box) out += fmt::format(R"("dst_box":{},)", box_json(chunk.dst_box));
  out += fmt::format(R"("src":{},"dst":{},"backend":"{}","op":"{}","stream":{},"deps":{})", chunk.src, chunk.dst,
                     to_string(chunk.backend), to_string(chunk.op), chunk.stream, list(chunk.deps));
  if (chunk.group != kNoGroup) out += fmt::format(R"(,"group":{})", chunk.group);
  if (chunk.runtime_rows)
    out += fmt::format(R"(,"runtime_rows":{{"dim":{},"counts":{},"index":{}}})", chunk.runtime_rows->dim,
                       quote(chunk.runtime_rows->counts), chunk.runtime_rows->index);
  out += '}';
  return out;
}

// `"key": [` then one element per line (diffs of golden plans then show which chunk changed);
// all on one line when `newline` is empty. Appends in place: a plan can be hundreds of MB.
template <class T, class Format>
void append_list(std::string& out, std::string_view pad, std::string_view newline, std::string_view key,
                 const std::vector<T>& items, Format format) {
  out += fmt::format("{}\"{}\":{}[", pad, key, newline.empty() ? "" : " ");
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += newline;
    out += pad;
    out += pad;
    out += format(items[i]);
    if (i + 1 < items.size()) out += ',';
  }
  if (!items.empty()) out += fmt::format("{}{}", newline, pad);
  out += "]";
}

}  // namespace

CommPlan parse_plan(std::string_view json_text, std::string_view source) {
  json document;
  try {
    document = detail::parse_without_duplicate_keys(json_text, source);
  } catch (const json::parse_error& e) {
    throw_syntax_error(json_text, source, e);
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    throw PlanParseError(fmt::format("{}: invalid JSON: {}", source, printable(e.what())));
  }
  return read_plan(JsonNode(document, "", source));
}

CommPlan load_plan(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const std::string name = path.string();
  std::error_code ec;
  const fs::file_type type = fs::status(path, ec).type();
  // Devices never end (/dev/zero) or block (a terminal); pipes and regular files are fine.
  if (type == fs::file_type::directory)
    throw PlanParseError(fmt::format("{}: expected a plan file, got a directory", name));
  if (type == fs::file_type::character || type == fs::file_type::block || type == fs::file_type::socket)
    throw PlanParseError(fmt::format("{}: expected a plan file, got a device or socket", name));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanParseError(fmt::format("{}: cannot open the plan file: {}", name, std::strerror(errno)));
  std::string text;
  std::vector<char> block(std::size_t{1} << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    text.append(block.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxPlanFileBytes)
      throw PlanParseError(
          fmt::format("{}: expected a plan file of at most {} bytes, got a larger one", name, kMaxPlanFileBytes));
  }
  if (in.bad()) throw PlanParseError(fmt::format("{}: cannot read the plan file: {}", name, std::strerror(errno)));
  return parse_plan(text, name);
}

std::string plan_to_json(const CommPlan& plan, int indent) {
  const std::string pad(static_cast<std::size_t>(std::max(indent, 0)), ' ');
  const std::string_view newline = indent < 0 ? "" : "\n", space = indent < 0 ? "" : " ";
  std::string out = fmt::format("{{{}", newline);
  out += fmt::format("{}\"version\":{}{},{}", pad, space, plan.version, newline);
  out += fmt::format("{}\"collective\":{}{},{}", pad, space, collective_json(plan.collective), newline);
  out += fmt::format("{}\"world_size\":{}{},{}", pad, space, plan.world_size, newline);
  if (!plan.nodes.empty()) out += fmt::format("{}\"nodes\":{}[{}],{}", pad, space, fmt::join(plan.nodes, ","), newline);
  out += fmt::format("{}\"tensors\":{}{},{}", pad, space, tensors_json(plan.tensors), newline);
  append_list(out, pad, newline, "ranks", plan.ranks, rank_json);
  out += fmt::format(",{}", newline);
  append_list(out, pad, newline, "chunks", plan.chunks, chunk_json);
  out += fmt::format("{}}}\n", newline);
  return out;
}

void save_plan(const CommPlan& plan, const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw UserError(fmt::format("{}: cannot write the plan file: {}", path.string(), std::strerror(errno)));
  out << plan_to_json(plan);
  out.close();
  if (!out) throw UserError(fmt::format("{}: cannot write the plan file: {}", path.string(), std::strerror(errno)));
}

}  // namespace syncopate::plan
