#include "syncopate/sim/attention_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/sim/autotune.hpp"

namespace syncopate::sim {
namespace {

// Microseconds for `flops` at `tflops` (1 TFLOP/s = 1e6 FLOP/us).
double at_rate(double flops, double tflops) { return flops / (tflops * 1e6); }

// Microseconds for `bytes` at `gbps` (1 GB/s = 1e3 bytes/us).
double bytes_at(double bytes, double gbps) { return bytes / (gbps * 1e3); }

// One rank sending `bytes_per_peer` to each of `peers` other ranks at once over `backend`:
// each link carries its share, all of them together at most the GPU's egress.
double exchange_us(const Calibration& c, plan::Backend backend, double bytes_per_peer, int peers) {
  if (peers <= 0 || bytes_per_peer <= 0) return 0;
  const BackendModel& m = c.backend(backend);
  const double link = bytes_at(bytes_per_peer, c.link_bandwidth_gbps(0, 1, backend));
  const double egress = bytes_at(bytes_per_peer * peers, std::min(c.egress_gbps, c.ingress_gbps));
  return std::max(link, egress) + m.latency_us + m.signal_latency_us;
}

struct Work {
  double library_us = 0;  // the attention at SDPA's rate
  double kernel_us = 0;   // at Syncopate's kernel's rate, with its in-loop waits (nothing to wait for)
};

// Attention of `rows` query positions of `heads` heads over `keys` key positions, of which the
// last `causal_keys` form a causal square with the rows (0: no mask).
Work attention_work(const AttentionModel& a, const AttentionShape& s, std::int64_t heads, double rows, double keys,
                    bool causal_square) {
  const double unit = 4.0 * static_cast<double>(s.batch * heads * s.head_dim) * rows;
  Work w;
  if (causal_square) {
    // keys - rows full keys and a causal square of rows x rows (half of it).
    const double full = unit * (keys - rows), square = unit * rows / 2;
    w.library_us = at_rate(full, a.library_tflops) + at_rate(square, a.library_causal_tflops);
    w.kernel_us = at_rate(full, a.kernel_tflops) * a.wait_overhead +
                  at_rate(square, a.kernel_causal_tflops) * a.wait_overhead_causal;
  } else {
    w.library_us = at_rate(unit * keys, a.library_tflops);
    w.kernel_us = at_rate(unit * keys, a.kernel_tflops) * a.wait_overhead;
  }
  return w;
}

AttentionPrediction ulysses(const AttentionShape& s, const Calibration& c, plan::Backend backend) {
  const auto& a = c.attention;
  const int w = s.world;
  const double seq = static_cast<double>(s.seq_local) * w;
  const double elem = s.elem_bytes, token = static_cast<double>(s.batch * s.head_dim) * elem;
  // Each rank keeps 1/w of its q, k, v piece and sends 1/w to every other rank; the output
  // goes back the same way.
  const double qkv_per_peer = token * static_cast<double>(s.seq_local) * (s.heads + 2 * s.kv_heads) / w;
  const double o_per_peer = token * static_cast<double>(s.seq_local) * s.heads / w;
  const Work work = attention_work(a, s, s.heads / w, seq, seq, s.causal);

  AttentionPrediction p;
  p.compute_us = work.library_us;
  // Sequential: NCCL all-to-all of q, k, v; SDPA over the whole sequence; all-to-all of o.
  p.comm_us =
      exchange_us(c, plan::Backend::nccl, qkv_per_peer, w - 1) + exchange_us(c, plan::Backend::nccl, o_per_peer, w - 1);
  p.sequential_us = p.comm_us + work.library_us + 3 * c.launch_overhead_us;
  // Fused: q, k, v packed into the heap (one local copy), the kernel starts at once on the own
  // piece while the others land; tiles of a piece can finish only after it has landed; the
  // output's return all-to-all runs after the kernel (it is not fused yet).
  const double pack = bytes_at(qkv_per_peer * w, c.local_copy_gbps);
  const double arrive = exchange_us(c, backend, qkv_per_peer, w - 1);
  const double kernel = std::max(work.kernel_us, arrive + work.kernel_us / w);
  p.fused_us = pack + kernel + exchange_us(c, backend, o_per_peer, w - 1) +
               bytes_at(o_per_peer * w, c.local_copy_gbps) + 2 * c.launch_overhead_us;
  return p;
}

AttentionPrediction ring(const AttentionShape& s, const Calibration& c, plan::Backend backend) {
  const auto& a = c.attention;
  const int w = s.world;
  const double n = static_cast<double>(s.seq_local);
  const double kv_piece = 2.0 * static_cast<double>(s.batch * s.kv_heads * s.head_dim) * n * s.elem_bytes;
  // The last rank does the most work: every earlier piece whole, its own one causal.
  const Work own = attention_work(a, s, s.heads, n, n, s.causal);
  const Work other = attention_work(a, s, s.heads, n, n, false);
  const double merge = bytes_at(4.0 * static_cast<double>(s.batch * s.heads * s.head_dim) * n, a.merge_gbps);

  AttentionPrediction p;
  p.compute_us = own.library_us + (w - 1) * other.library_us;
  // Sequential: w - 1 steps of (send the held K/V on, receive the next), then that piece's
  // attention and the merge; nothing overlaps.
  const double step = exchange_us(c, plan::Backend::nccl, kv_piece, 1);
  p.comm_us = (w - 1) * step;
  p.sequential_us = own.library_us + (w - 1) * (step + other.library_us + merge + c.launch_overhead_us);
  // Fused: the K/V piece copied into the heap, one kernel over the gathered sequence; piece s
  // lands after s hops of the ring all-gather; the tiles visit pieces as they land, so the
  // kernel ends no earlier than the last piece's arrival plus that piece's work.
  const double hop = exchange_us(c, backend, kv_piece, 1);
  const double total = own.kernel_us + (w - 1) * other.kernel_us;
  const double kernel = w == 1 ? total : std::max(total, (w - 1) * hop + other.kernel_us);
  p.fused_us = bytes_at(kv_piece, c.local_copy_gbps) + kernel + c.launch_overhead_us;
  return p;
}

}  // namespace

AttentionPrediction predict_attention(SeqParallel kind, const AttentionShape& s, const Calibration& c,
                                      plan::Backend backend) {
  const char* who = kind == SeqParallel::ulysses ? "ulysses attention" : "ring attention";
  if (!c.attention.modelled)
    throw CalibrationError(
        fmt::format("{}: calibration '{}' has no 'attention' section (measured rates of "
                    "SDPA and of the attention kernel)",
                    who, c.device));
  if (s.world < 1 || s.batch < 1 || s.heads < 1 || s.kv_heads < 1 || s.seq_local < 1 || s.head_dim < 1 ||
      s.elem_bytes < 1)
    throw UserError(
        fmt::format("{}: world, batch, heads, kv_heads, seq_local, head_dim and element size must be "
                    "positive (got world {}, batch {}, heads {}, kv_heads {}, seq_local {}, head_dim {}, "
                    "{} bytes)",
                    who, s.world, s.batch, s.heads, s.kv_heads, s.seq_local, s.head_dim, s.elem_bytes));
  if (s.heads % s.kv_heads != 0)
    throw UserError(fmt::format("{}: {} query heads are not a multiple of {} k/v heads", who, s.heads, s.kv_heads));
  if (kind == SeqParallel::ulysses && (s.heads % s.world != 0 || s.kv_heads % s.world != 0))
    throw UserError(fmt::format("{}: world {} must divide the head counts ({} query, {} k/v heads)", who, s.world,
                                s.heads, s.kv_heads));
  AttentionPrediction p = kind == SeqParallel::ulysses ? ulysses(s, c, backend) : ring(s, c, backend);
  // The same rule as the GEMM ops' decision (autotune.hpp): overlap must pay by a fraction and
  // by an absolute amount.
  const double saving = p.sequential_us - p.fused_us;
  const bool pays = p.fused_us < p.sequential_us * (1 - kDefaultMinGain) && saving >= kDefaultMinSavingUs;
  p.decision = pays ? "fused" : "sequential";
  p.reason = fmt::format(
      "{}: fused {:.1f} us vs sequential {:.1f} us ({}; attention alone {:.1f} us, "
      "communication {:.1f} us)",
      who, p.fused_us, p.sequential_us,
      pays ? "overlap pays"
           : "Syncopate's attention kernel is slower than SDPA by more than "
             "the communication it hides",
      p.compute_us, p.comm_us);
  if (!pays && saving > 0)
    p.reason = fmt::format(
        "{}: fused {:.1f} us vs sequential {:.1f} us (saves {:.1f} us, under the {:.0f}% / {:.0f} "
        "us floor)",
        who, p.fused_us, p.sequential_us, saving, 100 * kDefaultMinGain, kDefaultMinSavingUs);
  return p;
}

}  // namespace syncopate::sim
