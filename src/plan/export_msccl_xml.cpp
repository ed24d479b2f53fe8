// export_msccl_xml (import.hpp): a verified copy-engine / sm-copy plan -> MSCCL algorithm XML.
//
// Chunks along `dim` fall on one grid of N equal MSCCL chunks. The collective's tensor is the
// in-place buffer (all-gather: output "o"; reduce-scatter, all-reduce: input "i"); an
// all-to-all reads "i" and writes "o" (out of place). Thread blocks per rank:
//   - the issuing side of stream s: one per peer and direction; pushes (a copy issued by its
//     source: step "s") on channel 2s, pulls (issued by the destination: "r", or "rrc" for an
//     add) on channel 2s+1, local chunks ("cpy", "re") in one more;
//   - the other side of each connection (peer, channel): one thread block whose steps follow the
//     issuer's order ("r"/"rrc" for a push, "s" for a pull).
// A stream's order across its thread blocks and each dep become depid/deps on the step that
// lands the dep on that GPU (extra deps on one step go on "nop" steps before it, as msccl-tools
// does). import_plan reads this back to the same chunks in the same streams.
#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <pugixml.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

struct Step {
  std::string type;
  char srcbuf = 'i', dstbuf = 'o';
  std::int64_t srcoff = -1, dstoff = -1, cnt = 0;
  std::vector<int> deps;  // step ids (same GPU)
  int rank = -1, tb = -1, index = -1;
  bool depended = false;
};

struct Tb {
  int send = -1, recv = -1, chan = 0;
  std::vector<int> steps;  // step ids, in order
};

class Exporter {
 public:
  explicit Exporter(const CommPlan& plan) : plan_(plan), w_(plan.world_size) {}

  std::string run(std::string_view name) {
    check();
    tbs_.resize(w_);
    step_of_.resize(plan_.chunks.size());
    landing_.assign(plan_.chunks.size(), -1);
    for (int r = 0; r < w_; ++r)
      for (std::size_t s = 0; s < plan_.ranks[r].streams.size(); ++s) {
        const auto& stream = plan_.ranks[r].streams[s];
        for (std::size_t i = 0; i < stream.size(); ++i) add_chunk(r, static_cast<int>(s), stream[i]);
      }
    for (int r = 0; r < w_; ++r)
      for (std::size_t s = 0; s < plan_.ranks[r].streams.size(); ++s) {
        const auto& stream = plan_.ranks[r].streams[s];
        for (std::size_t i = 0; i < stream.size(); ++i) add_deps(stream[i], i == 0 ? -1 : stream[i - 1]);
      }
    return write(name);
  }

 private:
  void check() {
    const auto& c = plan_.collective;
    if (c.kind == Collective::custom || c.staged())
      throw UserError(fmt::format("export to MSCCL XML: a {}{} plan has no MSCCL collective",
                                  c.staged() ? "staged " : "", to_string(c.kind)));
    verify_or_throw(plan_, "export to MSCCL XML");
    for (const Chunk& ch : plan_.chunks)
      if (ch.runtime_rows)
        throw UserError(
            fmt::format("export to MSCCL XML: chunk {} carries a run-time number of rows "
                        "(runtime_rows); MSCCL chunks have fixed sizes",
                        ch.id));
    const auto& shape = plan_.tensors.at(c.tensor).shape;
    std::int64_t unit = shape[c.dim];
    for (const Chunk& ch : plan_.chunks) {
      if (ch.backend == Backend::nccl)
        throw UserError(
            fmt::format("export to MSCCL XML: chunk {} is an NCCL chunk (listed by both ranks); export a "
                        "copy-engine or sm-copy plan",
                        ch.id));
      for (const Box* b : {&ch.box, &ch.dst_box})
        for (std::size_t d = 0; d < shape.size(); ++d) {
          if (static_cast<int>(d) == c.dim) {
            unit = std::gcd(unit, std::gcd(b->offset[d], b->extent[d]));
          } else if (b->offset[d] != 0 || b->extent[d] != shape[d]) {
            throw UserError(
                fmt::format("export to MSCCL XML: chunk {} cuts dim {}; MSCCL chunks cut only the "
                            "collective's dim {}",
                            ch.id, d, c.dim));
          }
        }
    }
    unit_ = unit;
    n_ = shape[c.dim] / unit;
    if (c.kind != Collective::all_reduce && n_ % w_ != 0)
      throw UserError(
          fmt::format("export to MSCCL XML: the chunks fall on a grid of {} pieces along dim {}, which "
                      "does not give each of {} ranks the same number",
                      n_, c.dim, w_));
  }

  char buffer_of(const std::string& tensor) const {
    const auto kind = plan_.collective.kind;
    if (kind == Collective::all_to_all) return tensor == plan_.collective.tensor ? 'i' : 'o';
    return kind == Collective::all_gather ? 'o' : 'i';
  }
  std::int64_t index_of(const Box& box) const { return box.offset[plan_.collective.dim] / unit_; }
  std::int64_t count_of(const Box& box) const { return box.extent[plan_.collective.dim] / unit_; }

  // The thread block of `rank` for (send peer, recv peer, channel), made on first use.
  int tb(int rank, int send, int recv, int chan) {
    auto [it, fresh] = tb_index_[rank].try_emplace({send, recv, chan}, static_cast<int>(tbs_[rank].size()));
    if (fresh) tbs_[rank].push_back({send, recv, chan, {}});
    return it->second;
  }

  int add_step(int rank, int t, Step step) {
    step.rank = rank;
    step.tb = t;
    step.index = static_cast<int>(tbs_[rank][t].steps.size());
    steps_.push_back(std::move(step));
    tbs_[rank][t].steps.push_back(static_cast<int>(steps_.size()) - 1);
    return static_cast<int>(steps_.size()) - 1;
  }

  void add_chunk(int rank, int stream, int id) {
    const Chunk& c = plan_.chunks[id];
    const char sb = buffer_of(c.tensor), db = buffer_of(c.dst_tensor);
    const std::int64_t so = index_of(c.box), doff = index_of(c.dst_box), n = count_of(c.box);
    if (c.src == c.dst) {
      const int s =
          add_step(rank, tb(rank, -1, -1, 2 * stream), {c.op == ChunkOp::copy ? "cpy" : "re", sb, db, so, doff, n});
      step_of_[id] = {s, s};
      landing_[id] = s;
      return;
    }
    const bool push = rank == c.src;
    const int chan = 2 * stream + (push ? 0 : 1);
    const bool add = c.op == ChunkOp::reduce_add;
    // An "rrc" adds into its destination, read as its source too (the executor's local operand).
    Step send{"s", sb, db, so, doff, n}, recv{add ? "rrc" : "r", add ? db : sb, db, add ? doff : so, doff, n};
    const int s = add_step(c.src, tb(c.src, c.dst, -1, chan), std::move(send));
    const int r = add_step(c.dst, tb(c.dst, -1, c.src, chan), std::move(recv));
    step_of_[id] = {push ? s : r, push ? r : s};  // (issuer side, other side)
    landing_[id] = r;
  }

  void depend(int step, int on) {
    const Step& a = steps_[step];
    const Step& b = steps_[on];
    if (a.tb == b.tb && b.index < a.index) return;  // the thread block's order already holds it
    auto& deps = steps_[step].deps;
    if (std::find(deps.begin(), deps.end(), on) == deps.end()) deps.push_back(on);
    steps_[on].depended = true;
  }

  void add_deps(int id, int stream_prev) {
    const Chunk& c = plan_.chunks[id];
    const auto [issuer_step, other_step] = step_of_[id];
    if (stream_prev >= 0) depend(issuer_step, step_of_[stream_prev].first);
    for (int d : c.deps) {
      const Chunk& dep = plan_.chunks[d];
      const int on = landing_[d];
      if (dep.dst == steps_[issuer_step].rank) {
        depend(issuer_step, on);
      } else if (dep.dst == steps_[other_step].rank) {
        depend(other_step, on);
      } else {
        throw UserError(
            fmt::format("export to MSCCL XML: chunk {} ({} -> {}) depends on chunk {}, which lands on rank "
                        "{}; MSCCL steps depend only on steps of their own GPU",
                        id, c.src, c.dst, d, dep.dst));
      }
    }
  }

  std::string write(std::string_view name) {
    pugi::xml_document doc;
    pugi::xml_node algo = doc.append_child("algo");
    int channels = 0;
    for (const auto& rank_tbs : tbs_)
      for (const Tb& t : rank_tbs) channels = std::max(channels, t.chan + 1);
    const auto kind = plan_.collective.kind;
    const char* coll = kind == Collective::all_gather       ? "allgather"
                       : kind == Collective::reduce_scatter ? "reducescatter"
                       : kind == Collective::all_reduce     ? "allreduce"
                                                            : "alltoall";
    algo.append_attribute("name") = std::string(name).c_str();
    algo.append_attribute("proto") = "Simple";
    algo.append_attribute("nchannels") = channels;
    algo.append_attribute("nchunksperloop") = static_cast<long long>(n_);
    algo.append_attribute("ngpus") = w_;
    algo.append_attribute("coll") = coll;
    algo.append_attribute("inplace") = kind == Collective::all_to_all ? 0 : 1;
    // Per step id: its index once the nops carrying extra deps are in place.
    std::vector<int> final_index(steps_.size(), -1);
    for (int r = 0; r < w_; ++r)
      for (const Tb& t : tbs_[r]) {
        int index = 0;
        for (int s : t.steps) final_index[s] = (index += std::max<int>(1, static_cast<int>(steps_[s].deps.size()))) - 1;
      }
    for (int r = 0; r < w_; ++r) {
      pugi::xml_node gpu = algo.append_child("gpu");
      const long long per_rank = n_ / w_;
      gpu.append_attribute("id") = r;
      gpu.append_attribute("i_chunks") = kind == Collective::all_gather ? per_rank : static_cast<long long>(n_);
      gpu.append_attribute("o_chunks") = kind == Collective::reduce_scatter ? per_rank : static_cast<long long>(n_);
      gpu.append_attribute("s_chunks") = 0;
      for (std::size_t t = 0; t < tbs_[r].size(); ++t) {
        const Tb& block = tbs_[r][t];
        pugi::xml_node tb = gpu.append_child("tb");
        tb.append_attribute("id") = static_cast<int>(t);
        tb.append_attribute("send") = block.send;
        tb.append_attribute("recv") = block.recv;
        tb.append_attribute("chan") = block.chan;
        int index = 0;
        for (int s : block.steps) {
          const Step& step = steps_[s];
          for (std::size_t k = 0; k + 1 < step.deps.size(); ++k)
            write_step(tb, index++, {"nop"}, step.deps[k], false, final_index);
          write_step(tb, index++, step, step.deps.empty() ? -1 : step.deps.back(), step.depended, final_index);
        }
      }
    }
    std::ostringstream out;
    doc.save(out, "  ", pugi::format_default | pugi::format_no_declaration);
    return out.str();
  }

  void write_step(pugi::xml_node tb, int index, const Step& step, int dep, bool depended,
                  const std::vector<int>& final_index) {
    pugi::xml_node x = tb.append_child("step");
    x.append_attribute("s") = index;
    x.append_attribute("type") = step.type.c_str();
    x.append_attribute("srcbuf") = std::string(1, step.srcbuf).c_str();
    x.append_attribute("srcoff") = static_cast<long long>(step.srcoff);
    x.append_attribute("dstbuf") = std::string(1, step.dstbuf).c_str();
    x.append_attribute("dstoff") = static_cast<long long>(step.dstoff);
    x.append_attribute("cnt") = static_cast<long long>(step.cnt);
    x.append_attribute("depid") = dep < 0 ? -1 : steps_[dep].tb;
    x.append_attribute("deps") = dep < 0 ? -1 : final_index[dep];
    x.append_attribute("hasdep") = depended ? 1 : 0;
  }

  const CommPlan& plan_;
  int w_;
  std::int64_t unit_ = 1, n_ = 1;
  std::vector<Step> steps_;
  std::vector<std::vector<Tb>> tbs_;
  std::map<int, std::map<std::tuple<int, int, int>, int>> tb_index_;
  std::vector<std::pair<int, int>> step_of_;  // by chunk: (issuer side, other side) step ids
  std::vector<int> landing_;                  // by chunk: the step that lands it
};

}  // namespace

std::string export_msccl_xml(const CommPlan& plan, std::string_view name) { return Exporter(plan).run(name); }

}  // namespace syncopate::plan
