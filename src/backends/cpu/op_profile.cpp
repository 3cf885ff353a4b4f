#include "backends/cpu/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace kiln::cpu {

ProfileLevel profile_level_from_env() {
  const char* v = std::getenv("KILN_CPU_PROFILE");
  if (v == nullptr) return ProfileLevel::kOff;
  const std::string_view s(v);
  if (s == "1") return ProfileLevel::kOps;
  if (s == "nodes") return ProfileLevel::kNodes;
  return ProfileLevel::kOff;
}

void OpProfile::print(std::string_view unit, std::string_view extra) const {
  if (runs == 0) return;
  double total = 0;
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [kind, e] : by_kind) {
    total += e.seconds;
    rows.emplace_back(e.seconds, kind);
  }
  std::sort(rows.rbegin(), rows.rend());
  const auto n = static_cast<double>(runs);
  const std::string u(unit);
  std::fprintf(stderr, "kiln cpu profile: %zu %ss, %.3f ms a %s%s%.*s\n", runs, u.c_str(), total * 1e3 / n, u.c_str(),
               extra.empty() ? "" : ", ", static_cast<int>(extra.size()), extra.data());
  for (const auto& [seconds, kind] : rows) {
    std::fprintf(stderr, "  %-28s %9.3f ms a %s %6.1f%%  %4zu nodes\n", kind.c_str(), seconds * 1e3 / n, u.c_str(),
                 100.0 * seconds / std::max(total, 1e-12), by_kind.at(kind).nodes);
  }
}

}  // namespace kiln::cpu
