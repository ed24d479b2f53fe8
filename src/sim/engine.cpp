// The event loop: timed events in a heap, flows advanced by their max-min fair rates, tiles by
// a per-rank "work clock" that runs slower while communication shares the GPU.
#include "engine.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/core.h>

#include "fair_share.hpp"

namespace syncopate::sim::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;  // microseconds: events closer than this happen together

enum class EventKind { chunk_ready, chunk_landed, kernel_start };

struct Event {
  double time;
  long seq;  // insertion order: ties resolve the same way on every run
  EventKind kind;
  int a;
  int b;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

struct ChunkState {
  int pending = 0;          // `after` chunks not landed + gate tiles not finished
  double after_landed = 0;  // last `after` arrival
  double gate_open = 0;     // last gate tile end
  bool landed = false;
  double remaining = 0;  // bytes still to move while it flows
  double rate = 0;       // bytes per microsecond
};

struct RunningTile {
  double virtual_end;
  int worker;
  int tile;
  bool operator>(const RunningTile& o) const {
    return std::tie(virtual_end, worker) > std::tie(o.virtual_end, o.worker);
  }
};

struct RankState {
  std::vector<int> tile_pending;
  std::vector<std::vector<int>> tile_gates;  // tile -> chunks it gates
  std::vector<int> tile_spinner;             // tile -> worker spinning on it, or -1
  std::vector<bool> tile_done;
  std::vector<int> kernel_pending;
  std::vector<std::vector<int>> kernel_gates;  // kernel -> chunks it gates
  std::vector<double> kernel_waits_landed;
  std::size_t next_kernel = 0;  // the next kernel to launch
  int active_kernel = -1;
  bool active_finished = true;
  double prev_end = 0;
  std::size_t tiles_done_in_kernel = 0;
  std::vector<std::size_t> worker_next;  // static assignment: next position per worker
  std::size_t shared_next = 0;           // dynamic assignment
  bool kernel_running = false;           // between a kernel's start and its last tile
  double work_clock = 0;                 // microseconds of full-speed work done so far
  double rate = 1;                       // work clock speed (1 / slowdown)
  std::priority_queue<RunningTile, std::vector<RunningTile>, std::greater<>> running;
  std::vector<TileTiming> timing;  // by tile id
};

class Engine {
 public:
  Engine(const EngineInput& in, const Calibration& calib) : in_(in), calib_(calib) {}

  Timeline run() {
    setup();
    for (std::size_t c = 0; c < in_.chunks.size(); ++c)
      if (chunks_[c].pending == 0) schedule_ready(static_cast<int>(c));
    for (std::size_t r = 0; r < in_.ranks.size(); ++r) try_launch(static_cast<int>(r));
    loop();
    check_finished();
    return finish_timeline();
  }

 private:
  void setup() {
    const std::size_t n = in_.chunks.size();
    chunks_.assign(n, {});
    after_waiters_.assign(n, {});
    tile_waiters_.assign(n, {});
    kernel_waiters_.assign(n, {});
    timeline_.label = in_.label;
    timeline_.world_size = static_cast<int>(in_.ranks.size());
    timeline_.chunks.resize(n);
    for (std::size_t c = 0; c < n; ++c) {
      const auto& ch = in_.chunks[c];
      auto& t = timeline_.chunks[c];
      t.chunk = static_cast<int>(c);
      t.src = ch.src;
      t.dst = ch.dst;
      t.backend = ch.backend;
      t.issuer = ch.issuer;
      t.stream = ch.stream;
      t.bytes = ch.bytes;
      chunks_[c].pending = static_cast<int>(ch.after.size() + ch.gate_tiles.size() + ch.gate_kernels.size());
      for (int a : ch.after) after_waiters_.at(a).push_back(static_cast<int>(c));
    }
    ranks_.resize(in_.ranks.size());
    for (std::size_t r = 0; r < in_.ranks.size(); ++r) {
      const auto& er = in_.ranks[r];
      auto& rs = ranks_[r];
      if (er.workers < 1) throw InternalError(fmt::format("simulator: rank {} has {} SM workers", r, er.workers));
      timeline_.workers.push_back(er.workers);
      rs.tile_pending.assign(er.tile_count, 0);
      rs.tile_gates.assign(er.tile_count, {});
      rs.tile_spinner.assign(er.tile_count, -1);
      rs.tile_done.assign(er.tile_count, false);
      rs.timing.resize(er.tile_count);
      for (int t = 0; t < static_cast<int>(er.tile_waits.size()); ++t) {
        rs.tile_pending[t] = static_cast<int>(er.tile_waits[t].size());
        for (int c : er.tile_waits[t]) tile_waiters_.at(c).emplace_back(static_cast<int>(r), t);
      }
      rs.kernel_gates.assign(er.kernels.size(), {});
      std::vector<int> seen(er.tile_count, 0);
      for (std::size_t k = 0; k < er.kernels.size(); ++k) {
        rs.kernel_pending.push_back(static_cast<int>(er.kernels[k].waits.size()));
        rs.kernel_waits_landed.push_back(0);
        for (int c : er.kernels[k].waits) kernel_waiters_.at(c).emplace_back(static_cast<int>(r), static_cast<int>(k));
        for (int t : er.kernels[k].tiles) {
          if (t < 0 || t >= er.tile_count || seen[t]++)
            throw InternalError(fmt::format("simulator: rank {} lists tile {} twice or out of range", r, t));
        }
      }
      for (int t = 0; t < er.tile_count; ++t)
        if (!seen[t]) throw InternalError(fmt::format("simulator: rank {} never runs tile {}", r, t));
    }
    for (std::size_t c = 0; c < n; ++c) {
      for (auto [r, t] : in_.chunks[c].gate_tiles) ranks_.at(r).tile_gates.at(t).push_back(static_cast<int>(c));
      for (auto [r, k] : in_.chunks[c].gate_kernels) ranks_.at(r).kernel_gates.at(k).push_back(static_cast<int>(c));
    }
  }

  void push(double time, EventKind kind, int a, int b = 0) { events_.push({time, seq_++, kind, a, b}); }

  // --- chunks ---------------------------------------------------------------------------------
  void schedule_ready(int c) {
    const auto& ch = in_.chunks[c];
    double t = std::max(ch.not_before_us, chunks_[c].after_landed);
    if (!ch.gate_tiles.empty() || !ch.gate_kernels.empty()) t = std::max(t, chunks_[c].gate_open + ch.gate_delay_us);
    push(std::max(t, now_), EventKind::chunk_ready, c);
  }
  void release_one(int c) {
    if (--chunks_[c].pending == 0) schedule_ready(c);
  }
  int lane_key(int c) const {
    const auto& ch = in_.chunks[c];
    return ch.issuer * 3 + static_cast<int>(ch.backend);
  }
  void on_ready(int c) {
    timeline_.chunks[c].ready = now_;
    lane_queue_[lane_key(c)].insert({now_, c});
    dispatch(lane_key(c));
  }
  void dispatch(int key) {
    auto& queue = lane_queue_[key];
    const auto backend = static_cast<plan::Backend>(key % 3);
    while (!queue.empty() && lanes_used_[key] < calib_.backend(backend).concurrency) {
      const int c = queue.begin()->second;
      queue.erase(queue.begin());
      ++lanes_used_[key];
      timeline_.chunks[c].start = now_;
      chunks_[c].remaining = in_.chunks[c].bytes;
      flows_.push_back(c);
      rates_dirty_ = true;
    }
  }
  void on_transfer_end(int c) {
    const auto& ch = in_.chunks[c];
    timeline_.chunks[c].transfer_end = now_;
    --lanes_used_[lane_key(c)];
    const auto& model = calib_.backend(ch.backend);
    double add_us = 0;
    if (ch.add_step && calib_.reduce_add.add_gbps > 0) {
      const bool busy = in_.compute_slowdown && ranks_.at(ch.dst).kernel_running;
      const double gbps = busy ? calib_.reduce_add.add_under_compute_gbps : calib_.reduce_add.add_gbps;
      add_us = ch.bytes / (gbps * 1e3);  // GB/s -> bytes per microsecond
    }
    timeline_.chunks[c].add_us = add_us;
    const double latency = ch.inter_node ? calib_.network.latency_us : model.latency_us;
    push(now_ + latency + add_us + model.signal_latency_us, EventKind::chunk_landed, c);
    dispatch(lane_key(c));
  }
  void on_landed(int c) {
    chunks_[c].landed = true;
    timeline_.chunks[c].arrival = now_;
    for (int w : after_waiters_[c]) {
      chunks_[w].after_landed = std::max(chunks_[w].after_landed, now_);
      release_one(w);
    }
    for (auto [r, t] : tile_waiters_[c]) {
      auto& rs = ranks_[r];
      if (--rs.tile_pending[t] == 0 && rs.tile_spinner[t] >= 0) start_tile(r, rs.tile_spinner[t], t);
    }
    for (auto [r, k] : kernel_waiters_[c]) {
      auto& rs = ranks_[r];
      rs.kernel_waits_landed[k] = std::max(rs.kernel_waits_landed[k], now_);
      if (--rs.kernel_pending[k] == 0) try_launch(r);
    }
  }

  // --- kernels and tiles ----------------------------------------------------------------------
  void try_launch(int r) {
    auto& rs = ranks_[r];
    const auto& kernels = in_.ranks[r].kernels;
    if (rs.next_kernel >= kernels.size() || !rs.active_finished) return;
    const std::size_t k = rs.next_kernel;
    if (rs.kernel_pending[k] > 0) return;
    double start = rs.prev_end;
    if (!kernels[k].waits.empty()) start = std::max(start, rs.kernel_waits_landed[k] + calib_.sync_overhead_us);
    start = std::max(start, kernels[k].not_before_us) + calib_.launch_overhead_us;
    ++rs.next_kernel;
    rs.active_finished = false;
    push(std::max(start, now_), EventKind::kernel_start, r, static_cast<int>(k));
  }
  void on_kernel_start(int r, int k) {
    auto& rs = ranks_[r];
    const int workers = in_.ranks[r].workers;
    rs.active_kernel = k;
    rs.kernel_running = true;
    rates_dirty_ = true;  // links touching this rank now run at their under-compute bandwidth
    rs.tiles_done_in_kernel = 0;
    rs.shared_next = 0;
    rs.worker_next.resize(workers);
    for (int w = 0; w < workers; ++w) rs.worker_next[w] = static_cast<std::size_t>(w);
    if (in_.ranks[r].kernels[k].tiles.empty()) return kernel_finished(r);
    for (int w = 0; w < workers; ++w) claim(r, w);
  }
  void claim(int r, int w) {
    auto& rs = ranks_[r];
    const auto& tiles = in_.ranks[r].kernels[rs.active_kernel].tiles;
    std::size_t pos;
    if (in_.dynamic_assignment) {
      pos = rs.shared_next++;
    } else {
      pos = rs.worker_next[w];
      rs.worker_next[w] += in_.ranks[r].workers;
    }
    if (pos >= tiles.size()) return;  // this worker is done with the kernel
    const int t = tiles[pos];
    auto& timing = rs.timing[t];
    timing = {r, t, w, rs.active_kernel, -1, now_, 0, 0};
    if (rs.tile_pending[t] == 0)
      start_tile(r, w, t);
    else
      rs.tile_spinner[t] = w;
  }
  void start_tile(int r, int w, int t) {
    auto& rs = ranks_[r];
    rs.tile_spinner[t] = -1;
    rs.timing[t].start = now_;
    const EngineRank& er = in_.ranks[r];
    const double work = er.tile_scale.empty() ? er.tile_work_us : er.tile_work_us * er.tile_scale[t];
    rs.running.push({rs.work_clock + work, w, t});
  }
  void on_tile_done(int r, int w, int t) {
    auto& rs = ranks_[r];
    rs.timing[t].end = now_;
    rs.tile_done[t] = true;
    for (int c : rs.tile_gates[t]) {
      chunks_[c].gate_open = std::max(chunks_[c].gate_open, now_);
      release_one(c);
    }
    claim(r, w);
    if (++rs.tiles_done_in_kernel == in_.ranks[r].kernels[rs.active_kernel].tiles.size()) kernel_finished(r);
  }
  void kernel_finished(int r) {
    auto& rs = ranks_[r];
    rs.prev_end = now_;
    rs.active_finished = true;
    rs.kernel_running = false;
    rates_dirty_ = true;
    for (int c : rs.kernel_gates[rs.active_kernel]) {
      chunks_[c].gate_open = std::max(chunks_[c].gate_open, now_);
      release_one(c);
    }
    try_launch(r);
  }

  // --- rates and time -------------------------------------------------------------------------
  void recompute_rates() {
    rates_dirty_ = false;
    constexpr int kNic = -2;  // resource keys (src, kNic, kNic), (kNic, dst, kNic): NIC egress, ingress
    std::map<std::tuple<int, int, int>, int> link_index;
    std::vector<double> capacity;
    std::vector<std::vector<int>> uses(flows_.size());
    auto resource = [&](std::tuple<int, int, int> key, double gbps) {
      auto [it, fresh] = link_index.try_emplace(key, static_cast<int>(capacity.size()));
      if (fresh) capacity.push_back(gbps * 1e3);  // GB/s -> bytes per microsecond
      return it->second;
    };
    for (std::size_t f = 0; f < flows_.size(); ++f) {
      const auto& ch = in_.chunks[flows_[f]];
      const int b = static_cast<int>(ch.backend);
      // A GEMM running on either end slows the link (both ends' state is the same for every
      // flow on it, so one capacity per link).
      const bool busy = in_.compute_slowdown && ch.src != ch.dst &&
                        (ranks_.at(ch.src).kernel_running || ranks_.at(ch.dst).kernel_running);
      if (ch.inter_node) {  // the GPUs' NICs: per GPU, each way (rail-aligned, one NIC per GPU)
        const double nic = calib_.network.bandwidth_gbps;
        uses[f].push_back(resource({ch.src, ch.dst, b}, nic));
        uses[f].push_back(resource({ch.src, kNic, kNic}, nic));
        uses[f].push_back(resource({kNic, ch.dst, kNic}, nic));
        continue;
      }
      const double link = busy ? calib_.link_bandwidth_under_compute_gbps(ch.src, ch.dst, ch.backend)
                               : calib_.link_bandwidth_gbps(ch.src, ch.dst, ch.backend);
      uses[f].push_back(resource({ch.src, ch.dst, b}, link));
      if (ch.src != ch.dst) {
        uses[f].push_back(resource({ch.src, -1, -1}, calib_.egress_gbps));
        uses[f].push_back(resource({-1, ch.dst, -1}, calib_.ingress_gbps));
      }
    }
    const auto rates = max_min_rates(uses, capacity);
    std::vector<double> slowdown(ranks_.size(), 1.0);
    for (std::size_t f = 0; f < flows_.size(); ++f) {
      const auto& ch = in_.chunks[flows_[f]];
      chunks_[flows_[f]].rate = rates[f];
      const double s = calib_.backend(ch.backend).compute_slowdown;
      slowdown.at(ch.src) = std::max(slowdown.at(ch.src), s);
      slowdown.at(ch.dst) = std::max(slowdown.at(ch.dst), s);
    }
    for (std::size_t r = 0; r < ranks_.size(); ++r) ranks_[r].rate = in_.compute_slowdown ? 1.0 / slowdown[r] : 1.0;
  }

  double next_time() const {
    double t = events_.empty() ? kInf : events_.top().time;
    for (int c : flows_) t = std::min(t, now_ + chunks_[c].remaining / chunks_[c].rate);
    for (const auto& rs : ranks_)
      if (!rs.running.empty()) t = std::min(t, now_ + (rs.running.top().virtual_end - rs.work_clock) / rs.rate);
    return t;
  }

  void advance(double t) {
    const double dt = t - now_;
    for (int c : flows_) chunks_[c].remaining -= chunks_[c].rate * dt;
    for (auto& rs : ranks_) rs.work_clock += rs.rate * dt;
    now_ = t;
  }

  void loop() {
    for (;;) {
      if (rates_dirty_) recompute_rates();
      const double t = next_time();
      if (t == kInf) return;
      advance(t);
      // Flows that are through, in start order.
      std::vector<int> done;
      for (int c : flows_)
        if (chunks_[c].remaining / chunks_[c].rate <= kEps) done.push_back(c);
      if (!done.empty()) {
        std::erase_if(flows_, [&](int c) { return std::find(done.begin(), done.end(), c) != done.end(); });
        rates_dirty_ = true;
        for (int c : done) on_transfer_end(c);
      }
      // Tiles that are done, rank by rank.
      for (std::size_t r = 0; r < ranks_.size(); ++r) {
        auto& rs = ranks_[r];
        while (!rs.running.empty() && (rs.running.top().virtual_end - rs.work_clock) / rs.rate <= kEps) {
          const auto top = rs.running.top();
          rs.running.pop();
          on_tile_done(static_cast<int>(r), top.worker, top.tile);
        }
      }
      // Timed events due now (handlers may add more at this instant).
      while (!events_.empty() && events_.top().time <= now_ + kEps) {
        const Event e = events_.top();
        events_.pop();
        switch (e.kind) {
          case EventKind::chunk_ready:
            on_ready(e.a);
            break;
          case EventKind::chunk_landed:
            on_landed(e.a);
            break;
          case EventKind::kernel_start:
            on_kernel_start(e.a, e.b);
            break;
        }
      }
    }
  }

  void check_finished() const {
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (chunks_[c].landed) continue;
      const auto& ch = in_.chunks[c];
      throw UserError(
          fmt::format("simulate: rank {}, chunk {} ({} -> {}): deadlock: it never lands ({} of its stream "
                      "predecessors, deps and producer tiles never finished)",
                      ch.issuer, c, ch.src, ch.dst, chunks_[c].pending));
    }
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      for (std::size_t t = 0; t < ranks_[r].tile_done.size(); ++t)
        if (!ranks_[r].tile_done[t])
          throw UserError(fmt::format("simulate: rank {}, tile {}: deadlock: it never runs", r, t));
  }

  // See TileTiming::group_chunk.
  int group_chunk(int r, const EngineKernel& kernel, int t) const {
    int best = -1;
    auto consider = [&](int c) {
      if (best < 0 || timeline_.chunks[c].arrival > timeline_.chunks[best].arrival) best = c;
    };
    const auto& waits = in_.ranks[r].tile_waits;
    if (t < static_cast<int>(waits.size()))
      for (int c : waits[t]) consider(c);
    for (int c : kernel.waits) consider(c);
    if (best >= 0) return best;
    for (int c : ranks_[r].tile_gates[t])
      if (best < 0 || timeline_.chunks[c].start < timeline_.chunks[best].start) best = c;
    return best;
  }

  Timeline finish_timeline() {
    double total = 0;
    for (const auto& c : timeline_.chunks) total = std::max(total, c.arrival);
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      for (const auto& kernel : in_.ranks[r].kernels)
        for (int t : kernel.tiles) {
          timeline_.tiles.push_back(ranks_[r].timing[t]);
          timeline_.tiles.back().group_chunk = group_chunk(static_cast<int>(r), kernel, t);
          total = std::max(total, ranks_[r].timing[t].end);
        }
      total = std::max(total, ranks_[r].prev_end);
    }
    timeline_.total_us = total;
    return std::move(timeline_);
  }

  const EngineInput& in_;
  const Calibration& calib_;
  double now_ = 0;
  long seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<ChunkState> chunks_;
  std::vector<std::vector<int>> after_waiters_;
  std::vector<std::vector<std::pair<int, int>>> tile_waiters_;
  std::vector<std::vector<std::pair<int, int>>> kernel_waiters_;
  std::vector<RankState> ranks_;
  std::map<int, std::set<std::pair<double, int>>> lane_queue_;
  std::map<int, int> lanes_used_;
  std::vector<int> flows_;  // chunks moving bytes, in start order
  bool rates_dirty_ = false;
  Timeline timeline_;
};

}  // namespace

Timeline run_engine(const EngineInput& input, const Calibration& calib) { return Engine(input, calib).run(); }

}  // namespace syncopate::sim::detail
