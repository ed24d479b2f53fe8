// build_imported_plan: a SourceProgram (import_model.hpp) -> chunks with deps and origins.
//
// 1. pair the two-sided actions (sends with recvs, signals with waits) per (from, to, channel);
// 2. make one chunk per transfer, issued where the templates issue it: a copy by its source, a
//    reduce-add by its destination (so adds stay local);
// 3. compute, for every action, the set of chunks whose landing means "everything this action
//    waits for is complete" (`before`), and what it completes itself (`done`): a landing action
//    completes its chunk, a send or a sync action completes what came before it;
// 4. a chunk depends on `before` of each of its actions (the sender's and the receiver's);
// 5. an action that overwrites what an earlier send reads waits for that send's chunk.
// Streams and dep pruning follow in import_streams.cpp.
#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "import_model.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan::import_detail {

void refuse(std::string_view source, std::string_view element, std::string_view why) {
  throw PlanParseError(fmt::format("{}: {}: {}", source, element, why));
}

namespace {

// Unions of chunk sets grow along chains of sends (each keeps what came before it); past this
// many ids in all, an input is refused rather than allowed to take minutes and gigabytes.
constexpr std::size_t kMaxTotalSetSize = std::size_t{1} << 26;
// Sends x actions walked to order overwrites after sends (order_overwrites_after_sends).
constexpr std::size_t kMaxOverwriteSearch = std::size_t{1} << 28;

using ChunkSet = std::vector<int>;  // sorted, unique

void unite(ChunkSet& into, const ChunkSet& more) {
  if (more.empty()) return;
  ChunkSet out;
  out.reserve(into.size() + more.size());
  std::set_union(into.begin(), into.end(), more.begin(), more.end(), std::back_inserter(out));
  into.swap(out);
}

bool lands_chunk(ActionKind k) {
  return k == ActionKind::recv || k == ActionKind::put || k == ActionKind::get || k == ActionKind::local;
}

class Builder {
 public:
  Builder(SourceProgram& program, const ImportOptions& options) : p_(program), o_(options) {
    for (int r = 0; r < static_cast<int>(p_.lanes.size()); ++r)
      for (int l = 0; l < static_cast<int>(p_.lanes[r].size()); ++l) {
        base_[{r, l}] = static_cast<int>(refs_.size());
        for (int i = 0; i < static_cast<int>(p_.lanes[r][l].actions.size()); ++i) refs_.push_back({r, l, i});
      }
    chunk_of_.assign(refs_.size(), -1);
    partner_.assign(refs_.size(), -1);
  }

  ImportedPlan build() {
    check_actions();
    pair(ActionKind::send, ActionKind::recv, "send", "receive");
    pair(ActionKind::signal, ActionKind::wait, "signal", "wait");
    make_chunks();
    compute_done();
    ImportedPlan out;
    out.plan = std::move(p_.header);
    out.notes = std::move(p_.notes);
    for (std::size_t c = 0; c < chunks_.size(); ++c)
      for (int a : actions_of_chunk_[c]) unite(deps_[c], before(a));
    order_overwrites_after_sends();
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      Chunk chunk = std::move(chunks_[c]);
      chunk.deps = std::move(deps_[c]);
      out.plan.chunks.push_back(std::move(chunk));
    }
    out.origins = std::move(origins_);
    assign_streams(out.plan, issuers_);
    return out;
  }

 private:
  Action& at(int flat) {
    const ActionRef& r = refs_[static_cast<std::size_t>(flat)];
    return p_.lanes[r.rank][r.lane].actions[r.index];
  }
  int flat(const ActionRef& r) const { return base_.at({r.rank, r.lane}) + r.index; }
  int prev(int a) const { return refs_[a].index == 0 ? -1 : a - 1; }

  void check_actions() {
    const int world = p_.header.world_size;
    for (int a = 0; a < static_cast<int>(refs_.size()); ++a) {
      const Action& x = at(a);
      const int rank = refs_[a].rank;
      const bool peered = x.kind != ActionKind::local && x.kind != ActionKind::barrier && x.kind != ActionKind::nop;
      if (peered && (x.peer < 0 || x.peer >= world || x.peer == rank))
        refuse(o_.source, x.element, fmt::format("peer {} is not another rank of 0..{}", x.peer, world - 1));
      for (const ActionRef& d : x.after)
        if (d.rank != rank || d.lane < 0 || d.lane >= static_cast<int>(p_.lanes[rank].size()) || d.index < 0 ||
            d.index >= static_cast<int>(p_.lanes[rank][d.lane].actions.size()))
          throw InternalError(fmt::format("{}: {}: a dependency names no action", o_.source, x.element));
    }
  }

  // The k-th `first` from a to b on a channel goes with the k-th `second` on b from a.
  void pair(ActionKind first, ActionKind second, std::string_view first_name, std::string_view second_name) {
    using Key = std::tuple<int, int, int>;  // from, to, channel
    std::map<Key, std::vector<int>> firsts, seconds;
    for (int a = 0; a < static_cast<int>(refs_.size()); ++a) {
      const Action& x = at(a);
      const int rank = refs_[a].rank;
      if (x.kind == first) firsts[{rank, x.peer, x.channel}].push_back(a);
      if (x.kind == second) seconds[{x.peer, rank, x.channel}].push_back(a);
    }
    auto one_lane = [&](const std::vector<int>& list, std::string_view what) {
      for (int a : list)
        if (refs_[a].lane != refs_[list[0]].lane)
          refuse(o_.source, at(a).element,
                 fmt::format("this {0} and the one at {1} use one connection from two lanes, so their order is "
                             "not defined (give each lane its own channel)",
                             what, at(list[0]).element));
    };
    for (auto& [key, list] : firsts) {
      one_lane(list, first_name);
      const auto& other = seconds[key];
      one_lane(other, second_name);
      for (std::size_t k = 0; k < list.size(); ++k) {
        if (k >= other.size())
          refuse(o_.source, at(list[k]).element,
                 fmt::format("{} number {} from rank {} to rank {} on channel {} has no matching {} (rank {} posts {})",
                             first_name, k + 1, std::get<0>(key), std::get<1>(key), std::get<2>(key), second_name,
                             std::get<1>(key), other.size()));
        partner_[list[k]] = other[k];
        partner_[other[k]] = list[k];
      }
    }
    for (const auto& [key, list] : seconds)
      for (std::size_t k = firsts[key].size(); k < list.size(); ++k)
        refuse(o_.source, at(list[k]).element,
               fmt::format("{} number {} on rank {} from rank {} on channel {} has no matching {} (rank {} posts {})",
                           second_name, k + 1, std::get<1>(key), std::get<0>(key), std::get<2>(key), first_name,
                           std::get<0>(key), firsts[key].size()));
  }

  void add_chunk(int issuer, int partner, Chunk c, const std::string& origin) {
    const Action& x = at(issuer);
    if (c.box.extent != c.dst_box.extent) {
      const Action& y = partner >= 0 ? at(partner) : x;
      refuse(o_.source, x.element,
             fmt::format("moves a box of extents [{}] into one of extents [{}]{}", fmt::join(c.box.extent, ", "),
                         fmt::join(c.dst_box.extent, ", "), partner >= 0 ? " at " + y.element : ""));
    }
    c.id = static_cast<int>(chunks_.size());
    c.backend = o_.backend;
    chunk_of_[issuer] = c.id;
    std::vector<int> actions{issuer};
    if (partner >= 0) {
      chunk_of_[partner] = c.id;
      actions.push_back(partner);
    }
    actions_of_chunk_.push_back(std::move(actions));
    issuers_.push_back(
        {refs_[issuer].rank, refs_[issuer].lane, p_.lanes[refs_[issuer].rank][refs_[issuer].lane].group});
    origins_.push_back(origin);
    deps_.emplace_back();
    chunks_.push_back(std::move(c));
  }

  void make_chunks() {
    for (int a = 0; a < static_cast<int>(refs_.size()); ++a) {
      const Action& x = at(a);
      const int rank = refs_[a].rank;
      Chunk c;
      switch (x.kind) {
        case ActionKind::send:
        case ActionKind::recv: {
          const int send = x.kind == ActionKind::send ? a : partner_[a];
          const int recv = partner_[send];
          const Action& s = at(send);
          const Action& r = at(recv);
          // Copies are pushed by their source, reduce-adds pulled by their destination.
          if ((r.op == ChunkOp::copy) != (x.kind == ActionKind::send)) break;
          c = Chunk{-1,
                    s.place.tensor,
                    s.place.box,
                    r.place.tensor,
                    r.place.box,
                    refs_[send].rank,
                    refs_[recv].rank,
                    o_.backend,
                    r.op,
                    0,
                    {},
                    kNoGroup};
          add_chunk(a, partner_[a], std::move(c), s.element + " -> " + r.element);
          break;
        }
        case ActionKind::put:
          add_chunk(a, -1,
                    Chunk{-1,
                          x.place.tensor,
                          x.place.box,
                          x.other.tensor,
                          x.other.box,
                          rank,
                          x.peer,
                          o_.backend,
                          x.op,
                          0,
                          {},
                          kNoGroup},
                    x.element);
          break;
        case ActionKind::get:
          add_chunk(a, -1,
                    Chunk{-1,
                          x.other.tensor,
                          x.other.box,
                          x.place.tensor,
                          x.place.box,
                          x.peer,
                          rank,
                          o_.backend,
                          x.op,
                          0,
                          {},
                          kNoGroup},
                    x.element);
          break;
        case ActionKind::local:
          add_chunk(a, -1,
                    Chunk{-1,
                          x.place.tensor,
                          x.place.box,
                          x.other.tensor,
                          x.other.box,
                          rank,
                          rank,
                          o_.backend,
                          x.op,
                          0,
                          {},
                          kNoGroup},
                    x.element);
          break;
        default:
          break;
      }
    }
  }

  // What an action's "after" entry on `a` waits for: the chunk's landing, or what `a` completes.
  const ChunkSet& strong(int a) {
    if (chunk_of_[a] >= 0) {
      single_ = {chunk_of_[a]};
      return single_;
    }
    return done_[a];
  }

  // Inputs of `before(a)`: the lane predecessor, the `after` list, a wait's signal, the other
  // members' predecessors for a barrier.
  std::vector<std::pair<int, bool>> inputs(int a) {  // (action, strong)
    std::vector<std::pair<int, bool>> in;
    if (prev(a) >= 0) in.push_back({prev(a), false});
    const Action& x = at(a);
    for (const ActionRef& d : x.after) in.push_back({flat(d), true});
    if (x.kind == ActionKind::wait) in.push_back({partner_[a], false});
    for (const ActionRef& m : x.barrier)
      if (m.index > 0) in.push_back({flat(m) - 1, false});
    return in;
  }

  ChunkSet before(int a) {
    ChunkSet out;
    for (const auto& [b, is_strong] : inputs(a)) unite(out, is_strong ? strong(b) : done_[b]);
    return out;
  }

  // done(a) for every action, in an order where an action's inputs come first. Only actions
  // that complete "what came before them" (sends, syncs, nops) need their inputs; a landing
  // action completes its own chunk. A cycle left over is an ordering of syncs the source can
  // never satisfy: refused, naming the actions on it.
  void compute_done() {
    const int n = static_cast<int>(refs_.size());
    done_.assign(n, {});
    std::vector<std::vector<int>> users(n);
    std::vector<int> waiting(n, 0);
    std::vector<int> ready;
    for (int a = 0; a < n; ++a) {
      if (lands_chunk(at(a).kind)) {
        done_[a] = {chunk_of_[a]};
        continue;
      }
      for (const auto& [b, is_strong] : inputs(a))
        if (!(is_strong ? chunk_of_[b] >= 0 : lands_chunk(at(b).kind))) {
          users[b].push_back(a);
          ++waiting[a];
        }
      if (waiting[a] == 0) ready.push_back(a);
    }
    std::size_t total = 0;
    int finished = 0;
    while (!ready.empty()) {
      const int a = ready.back();
      ready.pop_back();
      ++finished;
      done_[a] = before(a);
      total += done_[a].size();
      if (total > kMaxTotalSetSize)
        refuse(o_.source, at(a).element, "too-complex: the orderings of this source would take too long to map");
      for (int u : users[a])
        if (--waiting[u] == 0) ready.push_back(u);
    }
    int landing = 0;
    for (int a = 0; a < n; ++a) landing += lands_chunk(at(a).kind) ? 1 : 0;
    if (finished + landing == n) return;
    std::vector<std::string> stuck;
    for (int a = 0; a < n && stuck.size() < 6; ++a)
      if (!lands_chunk(at(a).kind) && waiting[a] > 0) stuck.push_back(at(a).element);
    refuse(o_.source, stuck.front(),
           fmt::format("dependency-cycle: the source's own orderings wait on each other and can never start "
                       "(syncs and dependencies on the cycle include: {})",
                       fmt::join(stuck, "; ")));
  }

  // The one ordering a send's early completion loses: in the source, whatever comes after a
  // send (in its lane, or after anything that waited for it) runs after the send *read* its
  // data. The IR has no "read done" event, so a later action on the sender's rank that
  // overwrites what the send reads waits for the send's chunk to land instead.
  void order_overwrites_after_sends() {
    const int n = static_cast<int>(refs_.size());
    std::vector<std::vector<int>> next(n);
    std::size_t sends = 0;
    for (int a = 0; a < n; ++a) {
      for (const auto& [b, is_strong] : inputs(a)) next[b].push_back(a);
      if (at(a).kind == ActionKind::send) {
        next[a].push_back(partner_[a]);
        ++sends;
      }
    }
    if (sends * static_cast<std::size_t>(n) > kMaxOverwriteSearch) return;  // the verifier reports what is left
    std::vector<int> seen(n, -1);
    for (int s = 0; s < n; ++s) {
      const Action& send = at(s);
      if (send.kind != ActionKind::send) continue;
      const int rank = refs_[s].rank;
      std::vector<int> todo{s};
      seen[s] = s;
      while (!todo.empty()) {
        const int a = todo.back();
        todo.pop_back();
        for (int b : next[a]) {
          if (seen[b] == s) continue;
          seen[b] = s;
          todo.push_back(b);
          const Action& w = at(b);
          const Place* written = w.kind == ActionKind::recv || w.kind == ActionKind::get ? &w.place
                                 : w.kind == ActionKind::local                           ? &w.other
                                                                                         : nullptr;
          if (written != nullptr && refs_[b].rank == rank && chunk_of_[b] != chunk_of_[s] &&
              written->tensor == send.place.tensor && written->box.overlaps(send.place.box))
            unite(deps_[chunk_of_[b]], {chunk_of_[s]});
        }
      }
    }
  }

  SourceProgram& p_;
  const ImportOptions& o_;
  std::map<std::pair<int, int>, int> base_;  // (rank, lane) -> flat index of its first action
  std::vector<ActionRef> refs_;              // by flat index
  std::vector<int> chunk_of_;                // by flat index, -1 if none
  std::vector<int> partner_;                 // the paired send/recv, signal/wait
  std::vector<ChunkSet> done_;
  ChunkSet single_;
  std::vector<Chunk> chunks_;
  std::vector<std::vector<int>> actions_of_chunk_;
  std::vector<Issuer> issuers_;
  std::vector<std::string> origins_;
  std::vector<ChunkSet> deps_;
};

}  // namespace

ImportedPlan build_imported_plan(SourceProgram program, const ImportOptions& options) {
  if (static_cast<int>(program.lanes.size()) != program.header.world_size)
    throw InternalError(fmt::format("{}: {} ranks of lanes for world size {}", options.source, program.lanes.size(),
                                    program.header.world_size));
  return Builder(program, options).build();
}

}  // namespace syncopate::plan::import_detail
