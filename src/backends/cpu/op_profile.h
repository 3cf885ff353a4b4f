// KILN_CPU_PROFILE: where a CPU run's time goes. With KILN_CPU_PROFILE=1 in the environment the
// CPU backend (LLM steps) and the general-graph runner time every node and, when destroyed,
// print to stderr the time per kind of node over all their runs; KILN_CPU_PROFILE=nodes adds,
// for general graphs, the slowest nodes.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace kiln::cpu {

enum class ProfileLevel { kOff, kOps, kNodes };

ProfileLevel profile_level_from_env();

// Seconds and node count per kind of node, summed over `runs` runs.
struct OpProfile {
  struct Entry {
    double seconds = 0;
    size_t nodes = 0;
  };
  std::map<std::string, Entry> by_kind;
  size_t runs = 0;

  // One line of totals ("kiln cpu profile: 120 steps, 4.512 ms a step"), then a line per kind,
  // slowest first. `unit` names a run; `extra`, if not empty, follows the totals.
  void print(std::string_view unit, std::string_view extra = {}) const;
};

}  // namespace kiln::cpu
