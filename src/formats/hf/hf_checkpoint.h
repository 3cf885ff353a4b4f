// HfCheckpoint: a Hugging Face model directory opened for reading: its config.json, parsed into a
// ModelConfig, and its safetensors weights, mapped read-only.
//
// Weights are found, in this order:
//   1. model.safetensors.index.json: "weight_map" {tensor: shard file}; every shard it names must
//      exist in the directory and hold the tensors the index assigns to it;
//   2. model.safetensors;
//   3. otherwise every *.safetensors file in the directory (a tensor may appear in only one).
// A directory with only PyTorch pickles (*.bin, *.pt, *.pth) is rejected with the command that
// converts it; Kiln never unpickles.
//
// Ownership: HfCheckpoint owns the mapped shards (move-only). TensorView pointers and spans it
// returns stay valid while it lives, including across moves. Nothing here mutates files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "formats/hf/hf_config.h"
#include "formats/safetensors.h"

namespace kiln::formats {

class HfCheckpoint {
 public:
  HfCheckpoint(HfCheckpoint&&) noexcept = default;
  HfCheckpoint& operator=(HfCheckpoint&&) noexcept = default;
  HfCheckpoint(const HfCheckpoint&) = delete;
  HfCheckpoint& operator=(const HfCheckpoint&) = delete;

  static Expected<HfCheckpoint> open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }

  // Across all shards; nullptr if absent.
  const TensorView* find(std::string_view name) const;
  // Sorted.
  std::vector<std::string> tensor_names() const;
  // The safetensors files in use, sorted by file name.
  std::vector<std::string> shard_paths() const;

  // The tensor converted to float ([numel], row-major). Errors name the tensor when it is
  // missing, when its shape differs from `expected_shape`, or when its dtype is not F32/F16/BF16.
  Expected<std::vector<float>> load(std::string_view name,
                                    const std::vector<int64_t>& expected_shape) const;

  // The extra files an engine carries when present: tokenizer.json, tokenizer.model,
  // tokenizer_config.json, generation_config.json, special_tokens_map.json, vocab.json,
  // merges.txt. Returns file name -> contents (binary-safe).
  std::map<std::string, std::string> auxiliary_files() const;

 private:
  HfCheckpoint() = default;

  std::string dir_;
  ModelConfig config_;
  // Owned through unique_ptr so TensorView addresses never move.
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
};

}  // namespace kiln::formats
