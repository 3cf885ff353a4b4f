// The backend interface: what the executor needs from a device. A backend checks that it can
// run an engine (its target and every op), binds each node to a kernel once (prepare), then runs
// nodes on buffers the executor lays out from the graph's memory plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "runtime/kv_cache.h"

namespace kiln::runtime {

// The ragged batch of one step, as kernels see it. Sequence s owns token rows
// [query_start[s], query_start[s+1]); its first new token sits at position context_len[s].
struct StepView {
  int64_t num_tokens = 0;
  int64_t num_rows = 0;  // rows of logits requested
  int64_t num_seqs = 0;
  const int32_t* positions = nullptr;    // [num_tokens]
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* context_len = nullptr;  // [num_seqs]
  const int32_t* const* block_tables = nullptr;  // [num_seqs]
  KvCache* kv_cache = nullptr;
};

// Buffers of one node: inputs then outputs, in the node's order. Weights point at their stored bytes.
struct NodeBuffers {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string target() const = 0;
  // Fails with a message naming what to rebuild when an engine built for `engine_target` cannot run here.
  virtual Status check_target(const std::string& engine_target) const = 0;
  // Binds every node of `graph` to a kernel; fails naming the first node it cannot run.
  virtual Status prepare(const ir::Graph& graph) = 0;
  // Runs node `index` of the prepared graph.
  virtual void run_node(size_t index, const NodeBuffers& buffers, const StepView& step) = 0;
};

}  // namespace kiln::runtime
