// GrammarCache: compiled grammars by their source, so that repeated requests with the same
// schema, regex, choice list or grammar do not compile again (and find the token-mask caches
// their predecessors filled). Owns the model's TokenVocabulary, built from the tokenizer at the
// first get(). Bounded: the least recently used grammar leaves when more than `capacity` are
// held (requests still running keep theirs alive). Thread-safe; the tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "llm/structured/compiled_grammar.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm::structured {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };

// The grammar of one constraint. `source`: the schema's JSON text (kJsonSchema), nothing
// (kJsonObject), the regex, a JSON list of strings (kChoice) or the text grammar (kGrammar).
// `path` names the request field in error messages.
Expected<Grammar> constraint_grammar(ConstraintKind kind, const std::string& source, const std::string& path);

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tokenizer, size_t capacity = 64) : tokenizer_(tokenizer), capacity_(capacity) {}

  Expected<std::shared_ptr<const CompiledGrammar>> get(ConstraintKind kind, const std::string& source,
                                                       const std::string& path);
  // A grammar another front end builds (tool calls), cached under `key`, which must say all that
  // `build` depends on and not collide with the kinds above (their keys start with a digit).
  Expected<std::shared_ptr<const CompiledGrammar>> get(const std::string& key,
                                                       const std::function<Expected<Grammar>()>& build);

  std::shared_ptr<const TokenVocabulary> vocabulary();

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
  };
  Stats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  const Tokenizer& tokenizer_;
  size_t capacity_;
  std::once_flag vocabulary_once_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // most recently used first
  std::map<std::string, std::pair<std::shared_ptr<const CompiledGrammar>, std::list<std::string>::iterator>> grammars_;
  Stats stats_;
};

}  // namespace kiln::llm::structured
