// Small helpers for the passes that recognise subgraphs (fuse_subgraphs, fuse_epilogues).
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// The contents of constant `id` when it is an f32 weight.
std::optional<std::vector<float>> f32_constant(const ir::Graph& graph, ir::ValueId id);
// The value of constant `id` when it is an f32 weight of one element.
std::optional<double> scalar_constant(const ir::Graph& graph, ir::ValueId id);
// The contents of constant `id` when it is an i64 weight.
std::optional<std::vector<int64_t>> i64_constant(const ir::Graph& graph, ir::ValueId id);
// Whether `id` is a scalar constant within `tolerance` (relative) of `want`.
bool is_scalar(const ir::Graph& graph, ir::ValueId id, double want, double tolerance = 1e-6);

// The index of the one node reading `id` when `id` is not a graph output, or -1.
int64_t only_reader(const ir::Graph& graph, ir::ValueId id);
// The index of the one node reading `id` when it has op `op` and `id` is not a graph output, or -1.
int64_t sole_reader(const ir::Graph& graph, ir::ValueId id, const char* op);
// For a two-input node reading `id`: its other input (kNoValue when both are `id`).
ir::ValueId other_input(const ir::Node& node, ir::ValueId id);
// Disconnects a node that a fusion absorbed, so that later matches in the same sweep no longer
// see it as a reader or producer; erase_nodes removes it at the end of the pass.
void kill_node(ir::Graph& graph, size_t index, std::vector<bool>& dead);

}  // namespace kiln::passes
