// The named pass list of `kiln build`, in order, and the driver that runs it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace kiln::passes {

struct Pass {
  std::string name;
  Status (*run)(ir::Graph&, const PassContext&);
};

const std::vector<Pass>& default_pipeline();

// What one pass did to the graph's node count (removed, folded or fused nodes show as fewer).
struct PassRecord {
  std::string name;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
};

// Runs every pass, verifying the graph after each. If dump_after names a pass, the graph is
// printed to `dump` after it ("all" dumps after every pass). on_pass(i, n, name) reports progress;
// `records`, when given, receives one entry a pass.
Status run_pipeline(ir::Graph& graph, const PassContext& ctx, const std::string& dump_after,
                    const std::function<void(const std::string&)>& dump,
                    const std::function<void(size_t, size_t, const std::string&)>& on_pass,
                    std::vector<PassRecord>* records = nullptr);

}  // namespace kiln::passes
