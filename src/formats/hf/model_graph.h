// Turns a Hugging Face checkpoint into the Kiln IR graph of its architecture. Each architecture is
// a small builder in its own file (arch_*.cpp); they share the pieces in builder_context.h.
//
// The graph's weights load lazily from the checkpoint, which must outlive the graph until the
// engine has been written. Tensor presence and shapes are checked here, so a missing or
// mis-shaped tensor is reported before any work is done.
//
// Graph inputs:  ids i32[T], positions i32[T], logit_rows i32[R]
// Graph output:  logits f32[R, vocab] for the rows of the step listed in logit_rows.
#pragma once

#include "base/status.h"
#include "formats/hf/hf_checkpoint.h"
#include "ir/graph.h"

namespace kiln::formats {

Expected<ir::Graph> build_model_graph(const HfCheckpoint& checkpoint);

}  // namespace kiln::formats
