// HfTokenizer: a Hugging Face tokenizers pipeline with a BPE model, loaded from tokenizer.json
// (or assembled from parts by the vocab.json + merges.txt loader). Encoding runs, as the library
// does: added tokens matched in the raw text -> normalizer on the rest -> added tokens matched in
// the normalized text -> pre-tokenizer -> BPE per word -> post-processor. Decoding maps ids to
// pieces and runs the decoder chain.
//
// Invalid UTF-8 in the input is replaced by U+FFFD (one per maximal invalid subsequence) before
// anything else; the library only ever sees valid strings, so this is Kiln's rule.
// A tokenizer is immutable after loading and safe to use from several threads at once.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "llm/tokenizers/bpe/bpe_model.h"
#include "llm/tokenizers/hf/decoder.h"
#include "llm/tokenizers/hf/hf_tokenizer_added_tokens.h"
#include "llm/tokenizers/hf/normalizer.h"
#include "llm/tokenizers/hf/post_processor.h"
#include "llm/tokenizers/hf/pre_tokenizer.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm {

// The pieces of a pipeline; only `model` is required.
struct HfTokenizerParts {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<TokenDecoder> decoder;
  std::vector<HfAddedToken> added_tokens;
  std::optional<int32_t> bos_id;  // when unset, taken from the post-processor or well-known names
  std::optional<int32_t> eos_id;
};

Expected<std::unique_ptr<Tokenizer>> hf_tokenizer_from_parts(HfTokenizerParts parts);

// tokenizer.json contents; tokenizer_config_json (may be empty) adds the added tokens of its
// "added_tokens_decoder" that tokenizer.json lacks, names BOS/EOS ("bos_token", "eos_token"),
// and, when tokenizer.json has no post-processor, "add_bos_token"/"add_eos_token" add them.
// Errors name the offending field ("tokenizer.json: model.merges[12]: ...").
Expected<std::unique_ptr<Tokenizer>> hf_tokenizer_from_json(std::string_view json,
                                                           std::string_view tokenizer_config_json);

}  // namespace kiln::llm
