// The prompts a serving benchmark sends: each one text or token ids, with the number of tokens to
// generate for it. Read from a JSONL file, one object per line:
//   {"prompt": "Once upon a time", "output_len": 128}
//   {"prompt": [1, 15043, 3186], "output_len": 64}
// ("max_tokens" is accepted as another name for "output_len"; a line without either takes the
// default the caller passes, and is an error when there is none). Blank lines are skipped; any
// other bad line is an error naming the file and line. The returned prompts belong to the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::cli::bench_serve {

struct BenchPrompt {
  std::string text;              // used when ids is empty
  std::vector<int32_t> ids;      // a token-id prompt, as OpenAI's /v1/completions accepts it
  std::optional<int64_t> prompt_tokens;  // known for token-id prompts and random text prompts
  int64_t output_len = 0;        // max_tokens, sent with ignore_eos so the server generates exactly this many
  bool is_ids() const { return !ids.empty(); }
};

// Parses JSONL `content`; `name` prefixes error messages ("FILE:LINE: ...").
Expected<std::vector<BenchPrompt>> parse_jsonl_dataset(std::string_view content, const std::string& name,
                                                       std::optional<int64_t> default_output_len);

// Reads and parses a JSONL file.
Expected<std::vector<BenchPrompt>> load_jsonl_dataset(const std::string& path,
                                                      std::optional<int64_t> default_output_len);

}  // namespace kiln::cli::bench_serve
