// Max-min fair bandwidth sharing (internal to the simulator).
//
// Each flow (a chunk moving bytes) uses a few resources (its link, its source GPU's egress, its
// destination GPU's ingress). Progressive filling: every unfrozen flow's rate rises at the same
// pace until some resource is full; the flows on it freeze; repeat. The result is the max-min
// fair allocation, which is what several copies sharing one NVLink see in practice to first order.
#pragma once

#include <vector>

namespace syncopate::sim::detail {

// flow_resources[f] lists the resource indices flow f uses (each at most once); capacity[r] is
// resource r's capacity (> 0). Returns each flow's rate, in capacity units. A flow that uses no
// resource gets rate 0 (the caller gives every flow at least its link).
std::vector<double> max_min_rates(const std::vector<std::vector<int>>& flow_resources,
                                  const std::vector<double>& capacity);

}  // namespace syncopate::sim::detail
