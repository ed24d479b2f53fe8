// SVG picture of a timeline: ranks stacked, chunk lanes over SM-worker rows, a legend and axis.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include <fmt/core.h>

#include "syncopate/sim/trace.hpp"

namespace syncopate::sim {
namespace {

constexpr double kLeft = 86, kRight = 24, kTop = 44;
constexpr double kLaneHeight = 9, kMaxLanes = 12, kBandGap = 18, kLabelHeight = 14;

std::string escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

// Arrival group g >= 1 gets a hue by the golden angle, so neighbours differ; 0 is local work.
std::string group_colour(int group, bool pale = false) {
  if (group <= 0) return pale ? "#e4e4e4" : "#a9a9a9";
  const double hue = std::fmod((group - 1) * 137.508, 360.0);
  // Past a turn of the colour wheel (about 6 groups) hues come back close to earlier ones:
  // alternate the lightness per turn so neighbours in time stay apart.
  const int turn = ((group - 1) / 6) % 2;
  return fmt::format("hsl({:.1f},{}%,{}%)", hue, pale ? 60 : 62, pale ? 82 : (turn ? 34 : 50));
}

// A tick step of 1, 2 or 5 times a power of ten giving about `target` ticks.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string time_label(double us, double span) {
  if (span >= 2000) return fmt::format("{:g} ms", us / 1000);
  return fmt::format("{:g} us", us);
}

// Chunk bars in lanes: greedy by start, a bar goes to the first lane free at its start.
struct Lanes {
  std::vector<int> chunks;  // by start
  std::vector<int> lane;    // by position in `chunks`
  int count = 0;
  double top = 0;
};

Lanes pack(const Timeline& tl, std::vector<int> chunks) {
  Lanes out;
  std::sort(chunks.begin(), chunks.end(),
            [&](int a, int b) { return std::pair(tl.chunks[a].start, a) < std::pair(tl.chunks[b].start, b); });
  std::vector<double> lane_end;
  for (int c : chunks) {
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > tl.chunks[c].start + 1e-9) ++lane;
    if (lane >= kMaxLanes) lane = static_cast<std::size_t>(kMaxLanes) - 1;  // overlap the last lane
    if (lane >= lane_end.size()) lane_end.resize(lane + 1, 0);
    lane_end[lane] = std::max(lane_end[lane], tl.chunks[c].arrival);
    out.lane.push_back(static_cast<int>(lane));
  }
  out.chunks = std::move(chunks);
  out.count = static_cast<int>(lane_end.size());
  return out;
}

// Per rank: chunks landing here ("in", numbered by arrival) and, when its tiles produce
// chunks, the chunks leaving it ("out", numbered by start): group g of either list has the
// colour of g, and so do the tiles that wait for (or produce) that chunk.
struct RankLayout {
  Lanes in, out;
  std::map<int, int> in_group, out_group;  // chunk id -> group (1, 2, ...)
  double top = 0, workers_top = 0, bottom = 0;
};

std::map<int, int> number_by(const Timeline& tl, std::vector<int> chunks, double ChunkTiming::*when) {
  std::sort(chunks.begin(), chunks.end(),
            [&](int a, int b) { return std::pair(tl.chunks[a].*when, a) < std::pair(tl.chunks[b].*when, b); });
  std::map<int, int> out;
  for (std::size_t i = 0; i < chunks.size(); ++i) out[chunks[i]] = static_cast<int>(i) + 1;
  return out;
}

}  // namespace

std::string svg_timeline(const Timeline& tl, const SvgOptions& options) {
  const double width = std::max(400, options.width);
  const double plot_w = width - kLeft - kRight;
  const double span = tl.total_us > 0 ? tl.total_us : 1.0;
  auto x = [&](double t) { return kLeft + t / span * plot_w; };
  int max_workers = 1;
  for (int w : tl.workers) max_workers = std::max(max_workers, w);
  const double row_h = std::clamp(150.0 / max_workers, 1.0, 12.0);

  // Layout: per rank, the chunk lanes, then its worker rows.
  std::vector<RankLayout> ranks(tl.world_size);
  std::vector<std::set<int>> produced(tl.world_size);  // chunks a tile of the rank produces
  for (const auto& t : tl.tiles)
    if (t.group_chunk >= 0 && tl.chunks[t.group_chunk].src == t.rank && tl.chunks[t.group_chunk].dst != t.rank)
      produced.at(t.rank).insert(t.group_chunk);
  double y = kTop;
  for (int r = 0; r < tl.world_size; ++r) {
    auto& L = ranks[r];
    std::vector<int> in, out;
    for (const auto& c : tl.chunks) {
      if (c.dst == r) in.push_back(c.chunk);
      if (c.src == r && c.dst != r && !produced[r].empty()) out.push_back(c.chunk);
    }
    L.in_group = number_by(tl, in, &ChunkTiming::arrival);
    L.out_group = number_by(tl, out, &ChunkTiming::start);
    L.top = y;
    L.in = pack(tl, in);
    L.in.top = y + kLabelHeight;
    L.out = pack(tl, out);
    L.out.top = L.in.top + std::max(1, L.in.count) * kLaneHeight + 2;
    L.workers_top = L.out.top + L.out.count * kLaneHeight + 4;
    const int workers = r < static_cast<int>(tl.workers.size()) ? tl.workers[r] : 1;
    L.bottom = L.workers_top + workers * row_h;
    y = L.bottom + kBandGap;
  }
  const double axis_y = y;
  const double legend_y = axis_y + 34;
  const double height = legend_y + 40;

  std::string out;
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"11\">\n",
      width, height, width, height);
  out += fmt::format("<rect width=\"{:.0f}\" height=\"{:.0f}\" fill=\"white\"/>\n", width, height);
  const std::string title = options.title.empty() ? tl.label : options.title;
  out += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", kLeft, escape(title));
  out += fmt::format("<text x=\"{}\" y=\"36\" fill=\"#444\">total {:.1f} us, {} ranks</text>\n", kLeft, tl.total_us,
                     tl.world_size);

  // Grid lines and the time axis.
  const double step = tick_step(span, 8);
  for (double t = 0; t <= span + 1e-9; t += step) {
    out += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>\n", x(t),
                       kTop, axis_y);
    out += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", x(t),
                       axis_y, axis_y + 5);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x(t), axis_y + 17,
                       time_label(t, span));
  }
  out += fmt::format("<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", kLeft,
                     kLeft + plot_w, axis_y, axis_y);
  out += fmt::format("<text x=\"6\" y=\"{:.1f}\" fill=\"#444\">time</text>\n", axis_y + 17);

  auto draw_chunks = [&](const Lanes& lanes, const std::map<int, int>& group) {
    for (std::size_t i = 0; i < lanes.chunks.size(); ++i) {
      const auto& c = tl.chunks[lanes.chunks[i]];
      const int g = group.at(c.chunk);
      const double ly = lanes.top + lanes.lane[i] * kLaneHeight;
      out += fmt::format(
          "<g><title>chunk {} {}->{} ({}, {:.0f} bytes): start {:.2f} us, bytes through "
          "{:.2f} us, landed {:.2f} us</title>",
          c.chunk, c.src, c.dst, plan::to_string(c.backend), c.bytes, c.start, c.transfer_end, c.arrival);
      out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"/>", x(c.start),
                         ly, std::max(0.5, x(c.transfer_end) - x(c.start)), kLaneHeight - 2, group_colour(g));
      out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"/></g>\n",
                         x(c.transfer_end), ly, std::max(0.0, x(c.arrival) - x(c.transfer_end)), kLaneHeight - 2,
                         group_colour(g, true));
    }
  };
  for (int r = 0; r < tl.world_size; ++r) {
    const auto& L = ranks[r];
    out += fmt::format("<text x=\"6\" y=\"{:.1f}\" font-weight=\"bold\">rank {}</text>\n", L.top + 11, r);
    out += fmt::format("<text x=\"6\" y=\"{:.1f}\" fill=\"#555\">chunks in</text>\n", L.in.top + 8);
    if (L.out.count > 0)
      out += fmt::format("<text x=\"6\" y=\"{:.1f}\" fill=\"#555\">chunks out</text>\n", L.out.top + 8);
    out += fmt::format("<text x=\"6\" y=\"{:.1f}\" fill=\"#555\">SM workers</text>\n", L.workers_top + 9);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
        "stroke=\"#ccc\"/>\n",
        kLeft, L.in.top - 1, plot_w, L.bottom - L.in.top + 2);
    draw_chunks(L.in, L.in_group);
    draw_chunks(L.out, L.out_group);
  }
  for (const auto& t : tl.tiles) {
    const auto& L = ranks.at(t.rank);
    const double ty = L.workers_top + t.worker * row_h;
    const double h = row_h > 3 ? row_h - 1 : row_h;
    if (t.start > t.claimed + 1e-9)
      out += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"#ececec\"/>\n",
                         x(t.claimed), ty, x(t.start) - x(t.claimed), h);
    int g = 0;
    if (auto in = L.in_group.find(t.group_chunk); in != L.in_group.end())
      g = in->second;
    else if (auto o = L.out_group.find(t.group_chunk); o != L.out_group.end())
      g = o->second;
    out += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
        "stroke=\"white\" stroke-width=\"{}\"><title>rank {} tile {} on worker {}: {:.2f}-{:.2f} us"
        "</title></rect>\n",
        x(t.start), ty, std::max(0.5, x(t.end) - x(t.start)), h, group_colour(g), row_h > 3 ? 0.5 : 0, t.rank, t.tile,
        t.worker, t.start, t.end);
  }

  // Legend.
  double lx = kLeft;
  auto swatch = [&](const std::string& fill, const std::string& text) {
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"10\" fill=\"{}\" stroke=\"#999\" "
        "stroke-width=\"0.5\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        lx, legend_y - 9, fill, lx + 16, legend_y, escape(text));
    lx += 22 + 6.2 * static_cast<double>(text.size());
  };
  swatch(group_colour(0), "local work (no chunk)");
  swatch("#ececec", "worker spinning on a wait");
  for (int g = 1; g <= 5; ++g) swatch(group_colour(g), fmt::format("arrival group {}", g));
  swatch(group_colour(1, true), "latency after the bytes");
  out += fmt::format(
      "<text x=\"{}\" y=\"{:.1f}\" fill=\"#555\">Colour = the order in which chunks land on "
      "the rank (chunks in) or leave it (chunks out); a tile has the colour of the last "
      "chunk it waited for, or of the first it produces.</text>\n",
      kLeft, legend_y + 18);
  out += "</svg>\n";
  return out;
}

}  // namespace syncopate::sim
