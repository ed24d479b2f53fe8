// Looking at a timeline: a Chrome / Perfetto trace and an SVG picture.
#pragma once

#include <string>

#include "syncopate/sim/timeline.hpp"

namespace syncopate::sim {

// Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing): one process per rank,
// one track per (issuing rank, stream) for chunks (from start to arrival, with ready, transfer
// end and bytes in args) and one track per SM worker for tiles (and the spin before each).
// Times are microseconds. Deterministic: the same timeline gives the same text.
std::string chrome_trace_json(const Timeline& timeline);

struct SvgOptions {
  int width = 1200;   // pixels
  std::string title;  // printed on top; the timeline's label when empty
};

// An SVG timeline, ranks stacked top to bottom, time left to right: per rank, the chunks
// landing on it (a bar from start to arrival, solid while bytes move, pale for latency) and
// one row per SM worker (tiles as bars, spins as grey). Chunks and tiles share colours by
// arrival group (grey: local work), explained in a legend; a time axis runs along the bottom.
std::string svg_timeline(const Timeline& timeline, const SvgOptions& options = {});

}  // namespace syncopate::sim
