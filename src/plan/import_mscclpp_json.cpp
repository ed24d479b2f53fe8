// MSCCL++ execution plans (the JSON its Python DSL compiles to) -> SourceProgram.
//
// Per GPU: buffers in chunks (input_chunks, output_chunks, scratch_chunks; see
// import_buffers.hpp), channels (memory or port, each connected to one peer), remote buffers
// (another rank's input, output or scratch), and thread blocks of operations run in order. A
// thread block lists the channels and remote buffers it uses; an operation names them by their
// index in those lists. The operations read here:
//   put, pws, pwsf   local src_buff[i] -> remote dst_buff[i] (a pushed copy); pws/pwsf then
//                    signal the port channel (pwsf also flushes)
//   get              remote src_buff[i] -> local dst_buff[i] (a pulled copy)
//   copy             local -> local
//   re, rre, res, rres  dst = src_buff[0] + the other sources (local, or remote: pulled
//                    reduce-adds); res/rres then put dst to the remote dst_buff entries
//   signal, wait     per channel; the k-th signal from a to b on a channel releases the k-th
//                    wait on b's channel back to a (channels pair in order per peer and type);
//                    rlxsignal / rlxwait alike (the IR's ordering is never weaker)
//   barrier          the thread blocks of one GPU meeting at barrier_id
//   flush, nop       ordering points
// Packets (LL protocol), NVLS switch channels, semaphores, pipelines and thread block groups are
// refused by name: their synchronisation is not one the plan IR can state.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "import_buffers.hpp"
#include "import_model.hpp"
#include "json_checked.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan::import_detail {
namespace {

using detail::JsonNode;
using detail::ObjectReader;

enum ChannelKind { kMemory = 0, kPort = 1 };

struct Channel {
  int peer = -1;
  int ordinal = 0;  // among this GPU's channels of its kind to that peer
};

struct Gpu {
  std::vector<Channel> channels[2];           // by kind, global id
  std::vector<std::pair<int, char>> remotes;  // remote buffers: (owner rank, buffer)
};

struct Tb {
  std::vector<int> channels[2];  // tb-local index -> global id
  std::vector<int> remotes[2];   // tb-local buffer_id -> remote buffer, by access kind
};

class PlanReader {
 public:
  PlanReader(std::string_view text, const ImportOptions& o) : text_(text), o_(o) {}

  SourceProgram read() {
    const nlohmann::json doc = detail::parse_json_source(text_, o_.source);
    const JsonNode root(doc, "", o_.source);
    ObjectReader top(root, "execution plan",
                     {"name", "collective", "protocol", "inplace", "reuse_resources", "num_threads_per_block",
                      "use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size", "gpus"});
    const Collective kind = chunk_collective(top.required("collective").as_string(), o_.source, "collective");
    if (auto p = top.optional("protocol"); p && p->as_string() != "Simple")
      refuse(o_.source, "protocol",
             fmt::format("protocol \"{}\": packets carry their flags inside the data, a synchronisation the plan "
                         "IR's chunks cannot state; import a Simple-protocol plan",
                         p->as_string()));
    if (auto in = top.optional("inplace"); in && !in->value().is_boolean()) in->fail("true or false");
    if (kind == Collective::all_to_all && top.optional("inplace") && top.required("inplace").value().get<bool>())
      refuse(o_.source, "inplace",
             "an in-place alltoall overwrites the input it still sends from; the IR's all-to-all writes a separate "
             "output tensor");
    const auto gpus = top.required("gpus").elements();
    if (gpus.empty() || gpus.size() > 1024) top.required("gpus").fail("1 to 1024 GPUs");
    const int world = static_cast<int>(gpus.size());
    std::int64_t n = 0;
    for (const auto& g : gpus) {
      const char* key = kind == Collective::all_gather ? "output_chunks" : "input_chunks";
      if (!g.value().is_object() || !g.value().contains(key)) g.fail(fmt::format("a GPU object with \"{}\"", key));
      n = std::max<std::int64_t>(n, g.child(key).as_int64());
    }
    ChunkBuffers buffers(kind, world, n, o_, "gpus");
    SourceProgram program;
    std::vector<Gpu> parsed(gpus.size());
    for (int r = 0; r < world; ++r) parsed[r] = read_gpu_header(gpus[r], r, world, buffers);
    program.header = buffers.header();
    program.lanes.resize(gpus.size());
    for (int r = 0; r < world; ++r) read_threadblocks(gpus[r], r, parsed, buffers, program);
    top.finish();
    return program;
  }

 private:
  static int kind_of(const JsonNode& node) {
    const std::string t = node.as_string();
    if (t == "memory") return kMemory;
    if (t == "port") return kPort;
    node.fail(t == "switch" ? "\"memory\" or \"port\" (NVLS switch channels reduce inside the switch, which the plan "
                              "IR's point-to-point chunks cannot state)"
                            : "\"memory\" or \"port\"");
  }

  Gpu read_gpu_header(const JsonNode& node, int r, int world, ChunkBuffers& buffers) {
    ObjectReader f(node, "gpu",
                   {"id", "input_chunks", "output_chunks", "scratch_chunks", "channels", "remote_buffers", "semaphores",
                    "threadblocks"});
    if (f.required("id").as_int() != r) f.required("id").fail(fmt::format("{} (gpus[k] has id k)", r));
    buffers.declare(r, f.required("input_chunks").as_int64(), f.required("output_chunks").as_int64(),
                    f.required("scratch_chunks").as_int64(), node.path());
    Gpu gpu;
    std::map<std::pair<int, int>, int> count;  // (kind, peer) -> channels so far
    if (auto channels = f.optional("channels"))
      for (const JsonNode& c : channels->elements()) {
        ObjectReader cf(c, "channel", {"channel_type", "connected_to", "buffer_type", "rank_groups"});
        const int kind = kind_of(cf.required("channel_type"));
        for (const JsonNode& peer : cf.required("connected_to").elements()) {
          const int p = peer.as_int();
          if (p < 0 || p >= world || p == r) peer.fail(fmt::format("another rank of 0..{}", world - 1));
          gpu.channels[kind].push_back({p, count[{kind, p}]++});
        }
        cf.finish();
      }
    if (auto remotes = f.optional("remote_buffers"))
      for (const JsonNode& b : remotes->elements()) {
        ObjectReader bf(b, "remote buffer", {"rank", "type", "access_channel_types"});
        const int owner = bf.required("rank").as_int();
        if (owner < 0 || owner >= world) bf.required("rank").fail(fmt::format("a rank of 0..{}", world - 1));
        gpu.remotes.push_back({owner, buffer_char(bf.required("type"))});
        bf.finish();
      }
    if (auto sems = f.optional("semaphores"); sems && !sems->elements().empty())
      sems->fail(
          "no semaphores (sem_acquire / sem_release order thread blocks through shared counters, which the "
          "importer does not map)");
    return gpu;
  }

  static char buffer_char(const JsonNode& node) {
    const std::string t = node.as_string();
    if (t != "i" && t != "o" && t != "s") node.fail("\"i\", \"o\" or \"s\"");
    return t[0];
  }

  void read_threadblocks(const JsonNode& gpu_node, int r, const std::vector<Gpu>& gpus, const ChunkBuffers& buffers,
                         SourceProgram& program) {
    const auto tbs = gpu_node.child("threadblocks").elements();
    auto& lanes = program.lanes[r];
    lanes.resize(tbs.size());
    for (Lane& lane : lanes) lane.group = 0;                      // any two thread blocks may share a stream
    std::map<int, std::vector<std::vector<ActionRef>>> barriers;  // id -> per lane, occurrences
    std::map<int, std::pair<int, std::string>> barrier_size;      // id -> (num_threadblocks, element)
    for (std::size_t t = 0; t < tbs.size(); ++t) {
      ObjectReader f(tbs[t], "thread block", {"id", "ops", "channels", "remote_buffer_refs"});
      if (f.required("id").as_int() != static_cast<int>(t)) f.required("id").fail(fmt::format("{} (in order)", t));
      Tb tb;
      if (auto chans = f.optional("channels"))
        for (const JsonNode& c : chans->elements()) {
          ObjectReader cf(c, "channel reference", {"channel_type", "channel_ids", "buff"});
          const int kind = kind_of(cf.required("channel_type"));
          for (const JsonNode& id : cf.required("channel_ids").elements()) {
            const int g = id.as_int();
            if (g < 0 || g >= static_cast<int>(gpus[r].channels[kind].size()))
              id.fail(fmt::format("a channel of GPU {} ({} of this kind)", r, gpus[r].channels[kind].size()));
            tb.channels[kind].push_back(g);
          }
          cf.finish();
        }
      if (auto refs = f.optional("remote_buffer_refs"))
        for (const JsonNode& ref : refs->elements()) {
          ObjectReader rf(ref, "remote buffer reference", {"access_channel_type", "remote_buffer_ids"});
          const int kind = kind_of(rf.required("access_channel_type"));
          for (const JsonNode& id : rf.required("remote_buffer_ids").elements()) {
            const int b = id.as_int();
            if (b < 0 || b >= static_cast<int>(gpus[r].remotes.size()))
              id.fail(fmt::format("a remote buffer of GPU {} ({})", r, gpus[r].remotes.size()));
            tb.remotes[kind].push_back(b);
          }
          rf.finish();
        }
      const auto ops = f.required("ops").elements();
      f.finish();
      for (const JsonNode& op : ops) {
        Lane& lane = lanes[t];
        const std::size_t first = lane.actions.size();
        read_op(op, r, gpus[r], tb, buffers, lane);
        if (lane.actions.size() > first && lane.actions[first].kind == ActionKind::barrier) {
          const int id = op.child("barrier_id").as_int();
          auto& per_lane = barriers[id];
          per_lane.resize(tbs.size());
          per_lane[t].push_back({r, static_cast<int>(t), static_cast<int>(first)});
          barrier_size.try_emplace(id, op.child("num_threadblocks").as_int(), op.path());
        }
      }
    }
    for (auto& [id, per_lane] : barriers) {
      std::vector<std::vector<ActionRef>> members;
      for (const auto& occurrences : per_lane)
        if (!occurrences.empty()) members.push_back(occurrences);
      const auto& [size, element] = barrier_size[id];
      for (const auto& m : members)
        if (m.size() != members[0].size() || static_cast<int>(members.size()) != size)
          refuse(o_.source, element,
                 fmt::format("barrier {} of GPU {} is met by {} thread blocks ({} times by the first) but says "
                             "num_threadblocks {}: it would never open",
                             id, r, members.size(), members[0].size(), size));
      for (std::size_t k = 0; k < members[0].size(); ++k)
        for (const auto& m : members) {
          Action& a = lanes[m[k].lane].actions[m[k].index];
          for (const auto& other : members)
            if (&other != &m) a.barrier.push_back(other[k]);
        }
    }
  }

  struct Ref {
    bool remote = false;
    int peer = -1;
    Place place;
  };

  Ref read_ref(const JsonNode& node, int r, const Gpu& gpu, const Tb& tb, int kind, const ChunkBuffers& buffers,
               const std::string& element) {
    ObjectReader f(node, "buffer reference", {"type", "buffer_id", "index", "size", "switch_channel_id"});
    if (f.optional("switch_channel_id")) node.fail("a local or remote buffer (NVLS switch buffers are not read)");
    const std::int64_t index = f.required("index").as_int64(), size = f.required("size").as_int64();
    Ref ref;
    if (auto id = f.optional("buffer_id")) {
      const int b = id->as_int();
      if (b < 0 || b >= static_cast<int>(tb.remotes[kind].size()))
        id->fail(fmt::format("an index into the thread block's {} remote buffers ({})",
                             kind == kMemory ? "memory" : "port", tb.remotes[kind].size()));
      const auto [owner, buffer] = gpu.remotes[tb.remotes[kind][b]];
      ref = {true, owner, buffers.place(owner, buffer, index, size, element)};
    } else {
      ref = {false, r, buffers.place(r, buffer_char(f.required("type")), index, size, element)};
    }
    f.finish();
    return ref;
  }

  void read_op(const JsonNode& node, int r, const Gpu& gpu, const Tb& tb, const ChunkBuffers& buffers, Lane& lane);
  void reduce_into(const std::vector<Ref>& srcs, const Ref& dst, const std::string& element, Lane& lane);

  std::string_view text_;
  const ImportOptions& o_;
};

void PlanReader::reduce_into(const std::vector<Ref>& srcs, const Ref& dst, const std::string& element, Lane& lane) {
  auto same = [](const Place& a, const Place& b) { return a.tensor == b.tensor && a.box == b.box; };
  // The sum starts from the source that already sits in dst, else from a copy of the first.
  std::size_t base = srcs.size();
  for (std::size_t i = 0; i < srcs.size(); ++i)
    if (!srcs[i].remote && same(srcs[i].place, dst.place)) base = i;
  if (base == srcs.size()) {
    if (srcs.empty() || srcs[0].remote) refuse(o_.source, element, "a reduction whose first source is not local");
    lane.actions.push_back({ActionKind::local, element, -1, 0, srcs[0].place, dst.place, ChunkOp::copy, {}, {}});
    base = 0;
  }
  for (std::size_t i = 0; i < srcs.size(); ++i) {
    if (i == base) continue;
    const Ref& s = srcs[i];
    if (!s.remote && s.place.tensor == dst.place.tensor && s.place.box.overlaps(dst.place.box))
      refuse(o_.source, element, "a reduction source overlaps its destination without being it");
    if (s.remote)
      lane.actions.push_back({ActionKind::get, element, s.peer, 0, dst.place, s.place, ChunkOp::reduce_add, {}, {}});
    else
      lane.actions.push_back({ActionKind::local, element, -1, 0, s.place, dst.place, ChunkOp::reduce_add, {}, {}});
  }
}

void PlanReader::read_op(const JsonNode& node, int r, const Gpu& gpu, const Tb& tb, const ChunkBuffers& buffers,
                         Lane& lane) {
  ObjectReader f(node, "operation",
                 {"name", "src_buff", "dst_buff", "channel_ids", "channel_type", "reduce_op", "tbg_info", "barrier_id",
                  "num_threadblocks", "semaphore_ids", "iter_context", "ops"});
  const std::string name = f.required("name").as_string();
  const std::string element = node.path();
  auto fail = [&](std::string_view why) { refuse(o_.source, element, fmt::format("operation \"{}\": {}", name, why)); };
  if (f.optional("tbg_info"))
    fail("thread block groups split one operation over several thread blocks; the importer maps whole operations");
  if (auto op = f.optional("reduce_op"); op && op->as_string() != "sum")
    fail(fmt::format("reduce_op \"{}\": the IR's reductions add", op->as_string()));
  const int kind = f.optional("channel_type") && f.required("channel_type").as_string() != "none"
                       ? kind_of(f.required("channel_type"))
                       : kMemory;
  // Channel peers of this operation, in order.
  std::vector<Channel> channels;
  if (auto ids = f.optional("channel_ids"))
    for (const JsonNode& id : ids->elements()) {
      const int local = id.as_int();
      if (local < 0 || local >= static_cast<int>(tb.channels[kind].size()))
        id.fail(fmt::format("an index into the thread block's channels of this kind ({})", tb.channels[kind].size()));
      channels.push_back(gpu.channels[kind][tb.channels[kind][local]]);
    }
  std::vector<Ref> srcs, dsts;
  if (auto s = f.optional("src_buff"))
    for (const JsonNode& b : s->elements()) srcs.push_back(read_ref(b, r, gpu, tb, kind, buffers, element));
  if (auto d = f.optional("dst_buff"))
    for (const JsonNode& b : d->elements()) dsts.push_back(read_ref(b, r, gpu, tb, kind, buffers, element));
  auto sync = [&](ActionKind k) {
    if (channels.empty()) fail("names no channel");
    for (const Channel& c : channels)
      lane.actions.push_back({k, element, c.peer, c.ordinal * 2 + kind, {}, {}, ChunkOp::copy, {}, {}});
  };
  auto local_only = [&](const std::vector<Ref>& refs, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < std::min(to, refs.size()); ++i)
      if (refs[i].remote) fail("a remote buffer where a local one belongs");
  };
  auto puts = [&](std::size_t from, const Place& src_of_all, bool one_src) {
    for (std::size_t i = from; i < dsts.size(); ++i) {
      if (!dsts[i].remote) fail("a local buffer where a remote one belongs");
      const Place& src = one_src ? src_of_all : srcs[i].place;
      lane.actions.push_back({ActionKind::put, element, dsts[i].peer, 0, src, dsts[i].place, ChunkOp::copy, {}, {}});
    }
  };
  if (name == "nop" || name == "flush") {
    lane.actions.push_back({ActionKind::nop, element, -1, 0, {}, {}, ChunkOp::copy, {}, {}});
  } else if (name == "barrier") {
    f.required("barrier_id").as_int();
    f.required("num_threadblocks").as_int();
    lane.actions.push_back({ActionKind::barrier, element, -1, 0, {}, {}, ChunkOp::copy, {}, {}});
  } else if (name == "signal" || name == "rlxsignal") {
    sync(ActionKind::signal);
  } else if (name == "wait" || name == "rlxwait") {
    sync(ActionKind::wait);
  } else if (name == "put" || name == "pws" || name == "pwsf") {
    if (srcs.size() != dsts.size() || srcs.empty()) fail("needs one local source per remote destination");
    local_only(srcs, 0, srcs.size());
    if (kind == kPort)
      for (std::size_t i = 0; i < dsts.size(); ++i)
        if (i >= channels.size() || channels[i].peer != dsts[i].peer)
          fail("each remote destination needs the port channel to its owner");
    puts(0, {}, false);
    if (name != "put") {
      if (kind != kPort) fail("a put with signal goes through port channels");
      sync(ActionKind::signal);
    }
  } else if (name == "get") {
    if (srcs.size() != dsts.size() || srcs.empty()) fail("needs one local destination per remote source");
    local_only(dsts, 0, dsts.size());
    for (std::size_t i = 0; i < srcs.size(); ++i) {
      if (!srcs[i].remote) fail("a local buffer where a remote one belongs");
      lane.actions.push_back(
          {ActionKind::get, element, srcs[i].peer, 0, dsts[i].place, srcs[i].place, ChunkOp::copy, {}, {}});
    }
  } else if (name == "copy") {
    if (srcs.size() != dsts.size() || srcs.empty()) fail("needs one destination per source");
    local_only(srcs, 0, srcs.size());
    local_only(dsts, 0, dsts.size());
    for (std::size_t i = 0; i < srcs.size(); ++i)
      lane.actions.push_back({ActionKind::local, element, -1, 0, srcs[i].place, dsts[i].place, ChunkOp::copy, {}, {}});
  } else if (name == "re" || name == "rre" || name == "res" || name == "rres") {
    if (dsts.empty() || dsts[0].remote) fail("needs a local destination first");
    if (name == "re" || name == "res") local_only(srcs, 0, srcs.size());
    if (name == "re" || name == "rre")
      if (dsts.size() != 1) fail("has one destination");
    reduce_into(srcs, dsts[0], element, lane);
    puts(1, dsts[0].place, true);
  } else {
    const bool packet = name.find("pkt") != std::string::npos;
    const bool nvls = name == "glres" || name == "gstore";
    fail(packet ? "packet operations synchronise through flags inside the data, which the IR's chunks do not carry"
         : nvls ? "NVLS multimem operations reduce inside the switch, which point-to-point chunks cannot state"
         : name == "sem_acquire" || name == "sem_release"
             ? "semaphores order thread blocks through shared counters, which the importer does not map"
         : name == "pipeline" ? "pipelined loops (iter_context) repeat their operations over slices of the chunks"
                              : "not an MSCCL++ operation the importer knows (put, pws, pwsf, get, copy, re, rre, "
                                "res, rres, signal, wait, rlxsignal, rlxwait, flush, barrier, nop)");
  }
  f.finish();
}

}  // namespace

SourceProgram read_mscclpp_json(std::string_view text, const ImportOptions& options) {
  return PlanReader(text, options).read();
}

}  // namespace syncopate::plan::import_detail
