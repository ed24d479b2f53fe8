// import_plan: picks the format's reader, builds the plan (import_build.cpp), verifies it and
// names the source element of every chunk a violation mentions.
#include "syncopate/plan/import.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "import_model.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan {
namespace {

constexpr std::uintmax_t kMaxImportFileBytes = std::uintmax_t{1} << 30;

void check_options(const ImportOptions& o) {
  if (o.backend == Backend::nccl)
    throw ShapeError(
        fmt::format("{}: backend nccl: an imported plan issues each chunk from one side (copies pushed "
                    "by their source, reduce-adds pulled by their destination), and NCCL needs both "
                    "sides in streams of matching numbers; import with copy-engine or sm-copy",
                    o.source));
}

// Chunk ids a violation mentions: its own and every "chunk N" of its detail (cycles, races).
std::vector<int> mentioned_chunks(const Violation& v) {
  std::vector<int> ids;
  std::set<int> seen;
  auto add = [&](int id) {
    if (id >= 0 && seen.insert(id).second) ids.push_back(id);
  };
  add(v.chunk);
  const std::string& d = v.detail;
  for (std::size_t at = d.find("chunk "); at != std::string::npos; at = d.find("chunk ", at + 6)) {
    std::size_t i = at + 6;
    int id = 0;
    bool digits = false;
    while (i < d.size() && std::isdigit(static_cast<unsigned char>(d[i])) && id < 100000000) {
      id = id * 10 + (d[i++] - '0');
      digits = true;
    }
    if (digits) add(id);
  }
  return ids;
}

// The region a coverage violation is about, as the verifier spells it ("x[1:2, 0:4]"), when
// its detail names one of the plan's tensors that way.
std::optional<std::pair<std::string, Box>> region_of(const Violation& v, const CommPlan& plan) {
  const std::string& d = v.detail;
  for (const auto& [name, spec] : plan.tensors) {
    for (std::size_t at = d.find(name + "["); at != std::string::npos; at = d.find(name + "[", at + 1)) {
      if (at > 0 && (std::isalnum(static_cast<unsigned char>(d[at - 1])) || d[at - 1] == '_')) continue;
      Box box;
      std::istringstream in(d.substr(at + name.size() + 1));
      std::int64_t begin = 0, end = 0;
      char colon = 0, sep = 0;
      while (in >> begin >> colon >> end >> sep && colon == ':') {
        box.offset.push_back(begin);
        box.extent.push_back(end - begin);
        if (sep == ']') break;
      }
      if (sep == ']' && box.offset.size() == spec.shape.size()) return std::pair{name, box};
    }
  }
  return std::nullopt;
}

// For a violation about a region of a rank (no chunk of its own): the chunks that land there or
// read it on that rank, so the source steps around the gap are named.
std::string chunks_near(const Violation& v, const ImportedPlan& imported) {
  if (v.chunk >= 0 || v.rank < 0) return {};
  const auto region = region_of(v, imported.plan);
  if (!region) return {};
  const auto& [tensor, box] = *region;
  std::string out;
  int listed = 0;
  for (const bool landing : {true, false})
    for (const Chunk& c : imported.plan.chunks) {
      const bool hit = landing ? c.dst == v.rank && c.dst_tensor == tensor && c.dst_box.overlaps(box)
                               : c.src == v.rank && c.tensor == tensor && c.box.overlaps(box);
      if (!hit || c.id >= static_cast<int>(imported.origins.size()) || listed++ >= 4) continue;
      out += fmt::format("    chunk {} {} {} on rank {}; it comes from {}\n", c.id, landing ? "lands on" : "reads",
                         tensor, v.rank, imported.origins[static_cast<std::size_t>(c.id)]);
    }
  return out;
}

}  // namespace

std::string format_report_with_origins(const VerifyReport& report, const ImportedPlan& imported,
                                       std::string_view plan_name) {
  std::string out;
  for (const Violation& v : report.violations) {
    out += v.format(plan_name);
    out += '\n';
    int listed = 0;
    for (int id : mentioned_chunks(v)) {
      if (id >= static_cast<int>(imported.origins.size())) continue;
      if (++listed > 8) break;
      out += fmt::format("    chunk {} comes from {}\n", id, imported.origins[static_cast<std::size_t>(id)]);
    }
    out += chunks_near(v, imported);
  }
  return out;
}

ImportedPlan import_plan(std::string_view text, ImportFormat format, const ImportOptions& options) {
  check_options(options);
  import_detail::SourceProgram program;
  switch (format) {
    case ImportFormat::msccl_xml:
      program = import_detail::read_msccl_xml(text, options);
      break;
    case ImportFormat::mscclpp_json:
      program = import_detail::read_mscclpp_json(text, options);
      break;
    case ImportFormat::sendrecv:
      program = import_detail::read_sendrecv(text, options);
      break;
  }
  ImportedPlan imported = import_detail::build_imported_plan(std::move(program), options);
  const VerifyReport report = verify(imported.plan);
  if (!report.ok())
    throw PlanVerifyError(fmt::format("{}: the imported plan is not safe ({} violation{}):\n{}", options.source,
                                      report.violations.size(), report.violations.size() == 1 ? "" : "s",
                                      format_report_with_origins(report, imported, options.source)));
  return imported;
}

ImportedPlan import_plan_file(const std::filesystem::path& path, ImportFormat format, ImportOptions options) {
  options.source = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    throw PlanParseError(fmt::format("{}: cannot read: no such file", options.source));
  if (!std::filesystem::is_regular_file(status))
    throw PlanParseError(fmt::format("{}: cannot read: not a regular file", options.source));
  if (std::filesystem::file_size(path, ec) > kMaxImportFileBytes || ec)
    throw PlanParseError(fmt::format("{}: cannot read: larger than 1 GiB", options.source));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanParseError(fmt::format("{}: cannot read: {}", options.source, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return import_plan(text.str(), format, options);
}

}  // namespace syncopate::plan
