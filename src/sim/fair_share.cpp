#include "fair_share.hpp"

#include <limits>

namespace syncopate::sim::detail {

std::vector<double> max_min_rates(const std::vector<std::vector<int>>& flow_resources,
                                  const std::vector<double>& capacity) {
  const std::size_t flows = flow_resources.size();
  std::vector<double> rate(flows, 0.0);
  std::vector<double> residual = capacity;
  std::vector<bool> frozen(flows, false);
  for (std::size_t f = 0; f < flows; ++f) frozen[f] = flow_resources[f].empty();

  for (;;) {
    // How many unfrozen flows sit on each resource.
    std::vector<int> users(capacity.size(), 0);
    bool any = false;
    for (std::size_t f = 0; f < flows; ++f) {
      if (frozen[f]) continue;
      any = true;
      for (int r : flow_resources[f]) ++users[r];
    }
    if (!any) break;
    // The pace at which the first resource fills up.
    double step = std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < capacity.size(); ++r)
      if (users[r] > 0) step = std::min(step, residual[r] / users[r]);
    for (std::size_t f = 0; f < flows; ++f)
      if (!frozen[f]) rate[f] += step;
    for (std::size_t r = 0; r < capacity.size(); ++r) residual[r] -= step * users[r];
    // Freeze every flow that touches a full resource (relative tolerance: rounding).
    for (std::size_t f = 0; f < flows; ++f) {
      if (frozen[f]) continue;
      for (int r : flow_resources[f])
        if (residual[r] <= capacity[r] * 1e-12) frozen[f] = true;
    }
  }
  return rate;
}

}  // namespace syncopate::sim::detail
