// Post-processors of the Hugging Face tokenizers library, for single sequences: add the special
// tokens a model expects around the encoded text (TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel, Sequence), read from the "post_processor" object of
// tokenizer.json. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::llm {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // ids of the encoded text -> ids with the special tokens the template adds around them.
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // The ids added before and after a single sequence (BOS/EOS as the model sees them).
  virtual void special_ids(std::vector<int32_t>& before, std::vector<int32_t>& after) const = 0;
};

// `where` names the JSON field for error messages. A null JSON value gives a null pointer.
Expected<std::unique_ptr<PostProcessor>> post_processor_from_json(const nlohmann::json& json, const std::string& where);

// A processor that adds fixed ids before and after the text (BOS/EOS from tokenizer_config.json).
std::unique_ptr<PostProcessor> post_processor_wrap(std::vector<int32_t> before, std::vector<int32_t> after);

}  // namespace kiln::llm
