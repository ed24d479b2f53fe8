// MSCCL algorithm XML (what msccl-tools / MSCCLang emit, and NCCL's and RCCL's MSCCL executors
// run) -> SourceProgram. docs/IMPORT.md describes the mapping; in short, per <gpu>, each <tb>
// (send peer, recv peer, channel) is a lane and each <step> becomes actions:
//   s     send srcbuf[srcoff, +cnt) to the send peer
//   r     receive from the recv peer into dstbuf[dstoff, +cnt)
//   rcs   receive into dst, then send dst on
//   rrc   receive and add into dst (srcbuf/srcoff must name the same chunks: msccl-tools writes
//         the sender's place there and the executor reads a local operand, which agree only then)
//   rrs   receive and add into src, then send src on (the sum is kept in src: the IR has no
//         value in flight; the verifier then proves the promise with that)
//   rrcs  receive and add into dst (== src), then send dst on
//   cpy   local copy src -> dst (a copy onto itself, e.g. an in-place input onto the output, is
//         an ordering point only, listed in the notes)
//   re    local add src into dst
//   nop   an ordering point (carries a dependency for the step after it)
// depid/deps name a step of another thread block of the same GPU that must be complete first.
// A send is paired with a receive per (sender, receiver, channel) in step order.
#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <pugixml.hpp>

#include "import_buffers.hpp"
#include "import_model.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan::import_detail {
namespace {

struct RawStep {
  std::string element;
  std::string type;
  pugi::xml_node node;
  int dep_tb = -1, dep_step = -1;
  bool hasdep_given = false, hasdep = false;
};

struct RawTb {
  std::string element;
  int send = -1, recv = -1, chan = 0;
  std::vector<RawStep> steps;
};

// How many actions each step type becomes (so a dependency on a step can name its last one).
int actions_of(std::string_view type) { return type == "rcs" || type == "rrs" || type == "rrcs" ? 2 : 1; }

class XmlReader {
 public:
  XmlReader(std::string_view text, const ImportOptions& o) : text_(text), o_(o) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') line_starts_.push_back(i + 1);
  }

  SourceProgram read() {
    const pugi::xml_parse_result parsed = doc_.load_buffer(text_.data(), text_.size(), pugi::parse_default);
    if (!parsed) {
      const auto [line, col] = line_col(static_cast<std::size_t>(std::max<std::ptrdiff_t>(parsed.offset, 0)));
      throw PlanParseError(fmt::format("{}:{}:{}: XML syntax: {}", o_.source, line, col, parsed.description()));
    }
    const pugi::xml_node algo = doc_.document_element();
    if (std::string_view(algo.name()) != "algo")
      refuse(o_.source, where(algo, algo.name()),
             fmt::format("the root element is <{}>; an MSCCL algorithm is one <algo> element", algo.name()));
    check_attrs(algo, "algo",
                {"name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace", "minBytes",
                 "maxBytes"});
    const int ngpus = int_attr(algo, "algo", "ngpus");
    const std::string coll = str_attr(algo, "algo", "coll");
    const Collective kind = chunk_collective(coll, o_.source, where(algo, "algo"));
    if (kind == Collective::all_to_all && algo.attribute("inplace") && int_attr(algo, "algo", "inplace") != 0)
      refuse(o_.source, where(algo, "algo"),
             "an in-place alltoall overwrites the input it still sends from; the IR's all-to-all writes a separate "
             "output tensor");
    if (ngpus < 1 || ngpus > 1024)
      refuse(o_.source, where(algo, "algo"), fmt::format("ngpus {} is out of 1..1024", ngpus));
    ChunkBuffers buffers(kind, ngpus, int_attr(algo, "algo", "nchunksperloop"), o_, where(algo, "algo"));

    std::vector<std::vector<RawTb>> gpus(static_cast<std::size_t>(ngpus));
    std::vector<bool> seen(static_cast<std::size_t>(ngpus), false);
    int position = 0;
    for (pugi::xml_node gpu : algo.children()) {
      const std::string path = fmt::format("algo/gpu[{}]", position++);
      expect_name(gpu, "gpu", "algo", path);
      check_attrs(gpu, path, {"id", "i_chunks", "o_chunks", "s_chunks"});
      const int id = int_attr(gpu, path, "id");
      if (id < 0 || id >= ngpus || seen[id])
        refuse(
            o_.source, where(gpu, path),
            fmt::format("id {} is {}", id,
                        id < 0 || id >= ngpus ? fmt::format("out of 0..{}", ngpus - 1) : std::string("given twice")));
      seen[id] = true;
      buffers.declare(id, int_attr(gpu, path, "i_chunks"), int_attr(gpu, path, "o_chunks"),
                      int_attr(gpu, path, "s_chunks"), where(gpu, path));
      gpus[id] = read_tbs(gpu, path, id, ngpus);
    }
    for (int g = 0; g < ngpus; ++g)
      if (!seen[g])
        refuse(o_.source, where(algo, "algo"), fmt::format("ngpus is {} but there is no <gpu id=\"{}\">", ngpus, g));

    SourceProgram program;
    program.header = buffers.header();
    for (int g = 0; g < ngpus; ++g) program.lanes.push_back(make_lanes(gpus[g], g, buffers, program.notes));
    return program;
  }

 private:
  std::pair<std::size_t, std::size_t> line_col(std::size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t line = static_cast<std::size_t>(it - line_starts_.begin());
    return {line, offset - line_starts_[line - 1] + 1};
  }
  std::string where(pugi::xml_node node, std::string_view path) const {
    return fmt::format("{} (line {})", path,
                       line_col(static_cast<std::size_t>(std::max<std::ptrdiff_t>(node.offset_debug(), 0))).first);
  }

  void expect_name(pugi::xml_node node, std::string_view name, std::string_view parent, const std::string& path) {
    if (node.type() != pugi::node_element)
      refuse(o_.source, where(node, path),
             fmt::format("<{}> holds text; it may hold only <{}> elements", parent, name));
    if (std::string_view(node.name()) != name) {
      const bool new_format = std::string_view(node.name()) == "op";
      refuse(o_.source, where(node, path),
             fmt::format("<{}> may hold only <{}> elements, not <{}>{}", parent, name, node.name(),
                         new_format ? " (msccl-tools' newer <op> format is not read: emit with old_format=True)" : ""));
    }
  }

  void check_attrs(pugi::xml_node node, std::string_view path, std::initializer_list<std::string_view> known) {
    for (pugi::xml_attribute a : node.attributes())
      if (std::find(known.begin(), known.end(), std::string_view(a.name())) == known.end())
        refuse(o_.source, where(node, path),
               fmt::format("unknown attribute \"{}\" (known: {})", a.name(), fmt::join(known, ", ")));
  }

  std::string str_attr(pugi::xml_node node, std::string_view path, const char* name) {
    const pugi::xml_attribute a = node.attribute(name);
    if (!a) refuse(o_.source, where(node, path), fmt::format("attribute \"{}\" is missing", name));
    return a.value();
  }

  int int_attr(pugi::xml_node node, std::string_view path, const char* name) {
    const std::string text = str_attr(node, path, name);
    int value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end)
      refuse(o_.source, where(node, path), fmt::format("attribute {}=\"{}\" is not an integer", name, text));
    return value;
  }

  std::vector<RawTb> read_tbs(pugi::xml_node gpu, const std::string& gpu_path, int id, int ngpus) {
    std::vector<RawTb> tbs;
    std::map<int, RawTb> by_id;
    std::set<std::pair<int, int>> sends, recvs;  // (peer, chan) connections in use
    int position = 0;
    for (pugi::xml_node tb : gpu.children()) {
      const std::string path = fmt::format("{}/tb[{}]", gpu_path, position++);
      expect_name(tb, "tb", "gpu", path);
      check_attrs(tb, path, {"id", "send", "recv", "chan"});
      RawTb raw{
          where(tb, path), int_attr(tb, path, "send"), int_attr(tb, path, "recv"), int_attr(tb, path, "chan"), {}};
      const int tb_id = int_attr(tb, path, "id");
      for (int peer : {raw.send, raw.recv})
        if (peer != -1 && (peer < 0 || peer >= ngpus || peer == id))
          refuse(o_.source, raw.element,
                 fmt::format("peer {} is neither -1 nor another GPU of 0..{}", peer, ngpus - 1));
      if (raw.chan < 0) refuse(o_.source, raw.element, fmt::format("chan {} is negative", raw.chan));
      if (raw.send >= 0 && !sends.insert({raw.send, raw.chan}).second)
        refuse(o_.source, raw.element,
               fmt::format("a second thread block sends to GPU {} on channel {}: MSCCL pairs sends and receives per "
                           "connection, which one thread block owns",
                           raw.send, raw.chan));
      if (raw.recv >= 0 && !recvs.insert({raw.recv, raw.chan}).second)
        refuse(o_.source, raw.element,
               fmt::format("a second thread block receives from GPU {} on channel {}: MSCCL pairs sends and receives "
                           "per connection, which one thread block owns",
                           raw.recv, raw.chan));
      int step_position = 0;
      for (pugi::xml_node step : tb.children()) {
        const std::string step_path = fmt::format("{}/step[{}]", path, step_position);
        expect_name(step, "step", "tb", step_path);
        check_attrs(step, step_path,
                    {"s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"});
        RawStep s{where(step, step_path), str_attr(step, step_path, "type"), step};
        const int index = int_attr(step, step_path, "s");
        if (index != step_position)
          refuse(o_.source, s.element,
                 fmt::format("s=\"{}\" but this is step {} of its thread block (steps are numbered in order)", index,
                             step_position));
        if (step.attribute("depid")) s.dep_tb = int_attr(step, step_path, "depid");
        if (step.attribute("deps")) s.dep_step = int_attr(step, step_path, "deps");
        if (step.attribute("hasdep")) {
          s.hasdep_given = true;
          const int h = int_attr(step, step_path, "hasdep");
          if (h != 0 && h != 1) refuse(o_.source, s.element, fmt::format("hasdep=\"{}\" is neither 0 nor 1", h));
          s.hasdep = h == 1;
        }
        raw.steps.push_back(std::move(s));
        ++step_position;
      }
      if (!by_id.emplace(tb_id, std::move(raw)).second)
        refuse(o_.source, where(tb, path), fmt::format("thread block id {} is given twice", tb_id));
    }
    int expected = 0;
    for (auto& [tb_id, raw] : by_id) {
      if (tb_id != expected)
        refuse(o_.source, raw.element,
               fmt::format("thread block ids must be 0, 1, 2, ... (the executor refuses gaps); id {} is missing",
                           expected));
      tbs.push_back(std::move(raw));
      ++expected;
    }
    return tbs;
  }

  Place buffer_place(const RawStep& s, int gpu, const ChunkBuffers& buffers, const char* buf_attr,
                     const char* off_attr) {
    const std::string buf = str_attr(s.node, s.element, buf_attr);
    if (buf != "i" && buf != "o" && buf != "s")
      refuse(o_.source, s.element, fmt::format("{}=\"{}\" names no buffer (i, o or s)", buf_attr, buf));
    return buffers.place(gpu, buf[0], int_attr(s.node, s.element, off_attr), int_attr(s.node, s.element, "cnt"),
                         s.element);
  }

  std::vector<Lane> make_lanes(const std::vector<RawTb>& tbs, int gpu, const ChunkBuffers& buffers,
                               std::vector<std::string>& notes) {
    // The last action of every step, for dependencies on it.
    std::vector<std::vector<int>> last_action(tbs.size());
    for (std::size_t t = 0; t < tbs.size(); ++t) {
      int n = 0;
      for (const auto& s : tbs[t].steps) last_action[t].push_back((n += actions_of(s.type)) - 1);
    }
    std::vector<std::vector<bool>> depended(tbs.size());
    for (std::size_t t = 0; t < tbs.size(); ++t) depended[t].assign(tbs[t].steps.size(), false);

    std::vector<Lane> lanes(tbs.size());
    for (std::size_t t = 0; t < tbs.size(); ++t) {
      const RawTb& tb = tbs[t];
      // Channels 2k and 2k+1 form stream group k: export_msccl_xml puts the pushes of stream k
      // on channel 2k and its pulls on 2k+1.
      lanes[t].group = tb.chan / 2;
      for (const RawStep& s : tb.steps) {
        std::vector<ActionRef> after;
        if (s.dep_tb >= 0 || s.dep_step >= 0) {
          if (s.dep_tb < 0 || s.dep_tb >= static_cast<int>(tbs.size()) || s.dep_step < 0 ||
              s.dep_step >= static_cast<int>(tbs[s.dep_tb].steps.size()))
            refuse(o_.source, s.element,
                   fmt::format("depid=\"{}\" deps=\"{}\" names no step of GPU {} ({} thread blocks)", s.dep_tb,
                               s.dep_step, gpu, tbs.size()));
          after.push_back({gpu, s.dep_tb, last_action[s.dep_tb][s.dep_step]});
          depended[s.dep_tb][s.dep_step] = true;
        }
        add_step(lanes[t], tb, s, gpu, buffers, std::move(after), notes);
      }
    }
    for (std::size_t t = 0; t < tbs.size(); ++t)
      for (std::size_t k = 0; k < tbs[t].steps.size(); ++k)
        if (depended[t][k] && tbs[t].steps[k].hasdep_given && !tbs[t].steps[k].hasdep)
          refuse(o_.source, tbs[t].steps[k].element,
                 "another step depends on this one but it says hasdep=\"0\": the MSCCL executor would never signal it "
                 "and the dependent step would wait forever");
    return lanes;
  }

  void add_step(Lane& lane, const RawTb& tb, const RawStep& s, int gpu, const ChunkBuffers& buffers,
                std::vector<ActionRef> after, std::vector<std::string>& notes) {
    auto need_peer = [&](int peer, const char* what) {
      if (peer < 0)
        refuse(o_.source, s.element,
               fmt::format("a \"{}\" step {}s, but its thread block has {}=\"-1\"", s.type, what, what));
    };
    auto act = [&](ActionKind kind, int peer, Place place, ChunkOp op = ChunkOp::copy, Place other = {}) {
      Action a{kind, s.element, peer, tb.chan, std::move(place), std::move(other), op, {}, {}};
      a.after = std::exchange(after, {});  // the step's dependency holds its first action
      lane.actions.push_back(std::move(a));
    };
    auto same = [&](const Place& a, const Place& b, std::string_view why) {
      if (a.tensor != b.tensor || a.box != b.box) refuse(o_.source, s.element, why);
    };
    const std::string& type = s.type;
    if (type == "nop") {
      act(ActionKind::nop, -1, {});
    } else if (type == "s") {
      need_peer(tb.send, "send");
      act(ActionKind::send, tb.send, buffer_place(s, gpu, buffers, "srcbuf", "srcoff"));
    } else if (type == "r" || type == "rcs") {
      need_peer(tb.recv, "recv");
      if (type == "rcs") need_peer(tb.send, "send");
      Place dst = buffer_place(s, gpu, buffers, "dstbuf", "dstoff");
      act(ActionKind::recv, tb.recv, dst);
      if (type == "rcs") act(ActionKind::send, tb.send, dst);
    } else if (type == "rrc" || type == "rrcs" || type == "rrs") {
      need_peer(tb.recv, "recv");
      if (type != "rrc") need_peer(tb.send, "send");
      Place src = buffer_place(s, gpu, buffers, "srcbuf", "srcoff");
      if (type != "rrs")
        same(
            src, buffer_place(s, gpu, buffers, "dstbuf", "dstoff"),
            fmt::format("a \"{}\" step whose srcbuf/srcoff and dstbuf/dstoff name different chunks: msccl-tools writes "
                        "the sender's place as the source while the executor reads it as a local operand, so the "
                        "sum it stores is ambiguous; the IR adds what arrives into the chunks it lands on",
                        type));
      if (type == "rrs")
        notes.push_back(
            fmt::format("{}: rrs: the sum is kept in {} on GPU {} before it is sent on (MSCCL sends it "
                        "without storing it)",
                        s.element, src.tensor, gpu));
      act(ActionKind::recv, tb.recv, src, ChunkOp::reduce_add);
      if (type != "rrc") act(ActionKind::send, tb.send, src);
    } else if (type == "cpy" || type == "re") {
      Place src = buffer_place(s, gpu, buffers, "srcbuf", "srcoff");
      Place dst = buffer_place(s, gpu, buffers, "dstbuf", "dstoff");
      const bool onto_itself = src.tensor == dst.tensor && src.box == dst.box;
      if (type == "re" && onto_itself)
        refuse(o_.source, s.element, "a \"re\" step adding chunks into themselves (doubling them) is no reduction");
      if (onto_itself) {
        notes.push_back(
            fmt::format("{}: cpy onto the same chunks of {} (buffers the IR keeps in one tensor): an "
                        "ordering point only",
                        s.element, src.tensor));
        act(ActionKind::nop, -1, {});
      } else {
        act(ActionKind::local, -1, src, type == "re" ? ChunkOp::reduce_add : ChunkOp::copy, dst);
      }
    } else {
      refuse(o_.source, s.element,
             fmt::format("type=\"{}\" is not an MSCCL step type (s, r, rcs, rrc, rrs, rrcs, cpy, re, nop)", type));
    }
  }

  std::string_view text_;
  const ImportOptions& o_;
  std::vector<std::size_t> line_starts_;
  pugi::xml_document doc_;
};

}  // namespace

SourceProgram read_msccl_xml(std::string_view text, const ImportOptions& options) {
  return XmlReader(text, options).read();
}

}  // namespace syncopate::plan::import_detail
