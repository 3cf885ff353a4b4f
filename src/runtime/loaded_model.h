// A loaded engine: the mapped engine file, its parsed graph with every weight bound to its bytes
// in the mapping (no copy), and the model facts the runtime needs. Immutable once loaded; it
// owns the mapping, so it must outlive every Executor that runs it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_file.h"
#include "ir/graph.h"
#include "ir/input_profile.h"
#include "runtime/kv_cache.h"
#include "nlohmann/json.hpp"

namespace kiln::runtime {

struct ModelFacts {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;        // longest sequence the engine was built for
  int64_t max_batch_tokens = 0;   // most tokens in one step the engine was built for
  int64_t num_layers = 0;         // layers with a KV cache
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

class LoadedModel {
 public:
  static Expected<std::unique_ptr<LoadedModel>> load(const std::string& path, bool verify_checksum = true);

  const engine::EngineFile& file() const { return file_; }
  const ir::Graph& graph() const { return graph_; }
  const ModelFacts& facts() const { return facts_; }
  const nlohmann::json& metadata() const { return file_.metadata(); }
  // Files copied from the model directory at build time (tokenizer, chat template, generation
  // config), name -> contents.
  std::map<std::string, std::string> files() const;
  // A general engine's optimisation profiles (the bounds of its inputs' shapes); none for an LLM
  // engine or a general one built without any.
  Expected<std::vector<ir::InputProfile>> input_profiles() const;
  // Bytes of weights read by one forward step (every stored weight once).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The KV element that follows the model's precision (--kv-cache-dtype auto, as vLLM's): bf16
  // when every matrix product holds bf16 weights, as a framework running the checkpoint in bf16
  // keeps its keys and values, or fp8 (or a mix of the two: rounding keys and values to bf16 costs
  // far less than e4m3's 3 mantissa bits); fp32 otherwise (fp32 and fp16 weights, the integer
  // formats).
  KvCacheDtype native_kv_cache_dtype() const;

 private:
  explicit LoadedModel(engine::EngineFile file) : file_(std::move(file)) {}

  engine::EngineFile file_;
  ir::Graph graph_;
  ModelFacts facts_;
  uint64_t weight_bytes_ = 0;
};

// Blob names inside the engine file.
std::string weight_blob_name(const std::string& weight);
std::string file_blob_name(const std::string& file);

}  // namespace kiln::runtime
