#include "formats/hf/model_graph.h"

#include "formats/hf/builder_context.h"

namespace kiln::formats {

Expected<ir::Graph> build_gpt2(const HfCheckpoint& checkpoint);      // arch_gpt2.cpp
Expected<ir::Graph> build_baichuan(const HfCheckpoint& checkpoint);  // arch_baichuan.cpp

Expected<ir::Graph> build_model_graph(const HfCheckpoint& checkpoint) {
  Expected<ir::Graph> graph = Status(StatusCode::kInternal, "no builder ran");
  switch (checkpoint.config().architecture) {
    case Architecture::kLlama:
    case Architecture::kMistral:
    case Architecture::kQwen2: graph = build_llama_style(checkpoint); break;
    case Architecture::kGpt2: graph = build_gpt2(checkpoint); break;
    case Architecture::kBaichuan: graph = build_baichuan(checkpoint); break;
  }
  if (!graph) return graph.status();
  KILN_RETURN_IF_ERROR(ir::verify(*graph).with_context("graph built for " + checkpoint.config().architecture_name));
  return graph;
}

}  // namespace kiln::formats
