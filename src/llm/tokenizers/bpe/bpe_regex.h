// Regex: a compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) used by the
// tokenizers' split patterns (pre-tokenizers, tiktoken) and Replace normalizers/decoders.
// Patterns are written for Oniguruma, the engine of the Hugging Face tokenizers library; the
// one difference that matters to tokenizer patterns is fixed on compile: Oniguruma's \s includes
// U+0085 (NEL), PCRE2's does not. Immutable after construction; find_all may run on several
// threads at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::llm {

class Regex {
 public:
  // Compiles `pattern`. A pattern PCRE2 rejects is an InvalidArgument naming the offset.
  static Expected<Regex> compile(std::string_view pattern);
  // A Regex that matches `literal` exactly (metacharacters escaped).
  static Expected<Regex> literal(std::string_view literal);

  // Calls on_match(start, end) (byte offsets) for each non-overlapping match, left to right.
  // `text` must be valid UTF-8 (the callers sanitize input first). Empty matches are reported
  // and the search resumes one character later.
  void find_all(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  Regex(std::shared_ptr<const Code> code, std::string pattern)
      : code_(std::move(code)), pattern_(std::move(pattern)) {}
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

// Rewrites an Oniguruma pattern for PCRE2 (see the class comment). Exposed for tests.
std::string regex_oniguruma_to_pcre2(std::string_view pattern);

}  // namespace kiln::llm
