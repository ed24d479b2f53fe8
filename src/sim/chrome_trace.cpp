// Chrome trace-event JSON of a timeline
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
#include <map>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "syncopate/sim/trace.hpp"

namespace syncopate::sim {
namespace {

using nlohmann::json;

// Thread ids: streams below kWorkerTid, SM workers above it, so streams sort first.
constexpr int kWorkerTid = 1000;

json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string chrome_trace_json(const Timeline& tl) {
  json events = json::array();
  for (int r = 0; r < tl.world_size; ++r) {
    events.push_back(metadata("process_name", r, 0, fmt::format("rank {}", r)));
    events.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", r}, {"tid", 0}, {"args", {{"sort_index", r}}}});
  }
  std::set<std::pair<int, int>> streams;
  for (const auto& c : tl.chunks) {
    streams.emplace(c.issuer, c.stream);
    events.push_back({{"ph", "X"},
                      {"cat", "chunk"},
                      {"pid", c.issuer},
                      {"tid", 1 + c.stream},
                      {"name", fmt::format("chunk {} {}->{}", c.chunk, c.src, c.dst)},
                      {"ts", c.start},
                      {"dur", c.arrival - c.start},
                      {"args",
                       {{"chunk", c.chunk},
                        {"backend", std::string(plan::to_string(c.backend))},
                        {"bytes", c.bytes},
                        {"ready_us", c.ready},
                        {"transfer_end_us", c.transfer_end},
                        {"arrival_us", c.arrival}}}});
    // An arrow from the issuing stream to the destination, where the signal lands.
    events.push_back({{"ph", "i"},
                      {"cat", "arrival"},
                      {"s", "p"},
                      {"pid", c.dst},
                      {"tid", 0},
                      {"name", fmt::format("chunk {} landed", c.chunk)},
                      {"ts", c.arrival}});
  }
  for (auto [rank, stream] : streams)
    events.push_back(metadata("thread_name", rank, 1 + stream, fmt::format("stream {}", stream)));
  std::set<std::pair<int, int>> workers;
  for (const auto& t : tl.tiles) {
    workers.emplace(t.rank, t.worker);
    const int tid = kWorkerTid + t.worker;
    if (t.start > t.claimed)
      events.push_back({{"ph", "X"},
                        {"cat", "wait"},
                        {"pid", t.rank},
                        {"tid", tid},
                        {"name", "spin"},
                        {"ts", t.claimed},
                        {"dur", t.start - t.claimed},
                        {"args", {{"tile", t.tile}, {"waits_for_chunk", t.group_chunk}}}});
    events.push_back({{"ph", "X"},
                      {"cat", "tile"},
                      {"pid", t.rank},
                      {"tid", tid},
                      {"name", fmt::format("tile {}", t.tile)},
                      {"ts", t.start},
                      {"dur", t.end - t.start},
                      {"args", {{"tile", t.tile}, {"kernel", t.kernel}, {"group_chunk", t.group_chunk}}}});
  }
  for (auto [rank, worker] : workers)
    events.push_back(metadata("thread_name", rank, kWorkerTid + worker, fmt::format("SM worker {}", worker)));
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ns"},
              {"otherData", {{"label", tl.label}, {"total_us", tl.total_us}}}};
  return doc.dump(1);
}

}  // namespace syncopate::sim
