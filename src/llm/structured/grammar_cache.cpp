#include "llm/structured/grammar_cache.h"

#include <nlohmann/json.hpp>

#include "llm/structured/ebnf_parser.h"
#include "llm/structured/json_schema.h"
#include "llm/structured/regex_parser.h"

namespace kiln::llm::structured {

Expected<Grammar> constraint_grammar(ConstraintKind kind, const std::string& source, const std::string& path) {
  switch (kind) {
    case ConstraintKind::kJsonSchema:
      return json_schema_grammar(source, path);
    case ConstraintKind::kJsonObject:
      return json_object_grammar();
    case ConstraintKind::kRegex: {
      auto g = regex_grammar(source);
      if (!g) return invalid_argument(path + ": " + g.status().message());
      return g;
    }
    case ConstraintKind::kChoice: {
      const auto list = nlohmann::json::parse(source, nullptr, false);
      if (!list.is_array() || list.empty()) return invalid_argument(path + ": choice must be a non-empty list of strings");
      std::vector<std::string> alts;
      for (const auto& c : list) {
        if (!c.is_string() || c.get<std::string>().empty()) {
          return invalid_argument(path + ": choice must be a non-empty list of non-empty strings");
        }
        alts.push_back(c.get<std::string>());
      }
      GrammarBuilder b;
      const int32_t root = b.add("root", Expr::literal_set(std::move(alts)));
      return b.build(root);
    }
    case ConstraintKind::kGrammar: {
      auto g = parse_ebnf(source);
      if (!g) return invalid_argument(path + ": " + g.status().message());
      return g;
    }
  }
  return invalid_argument(path + ": unknown constraint");
}

std::shared_ptr<const TokenVocabulary> GrammarCache::vocabulary() {
  std::call_once(vocabulary_once_, [&] { vocabulary_ = TokenVocabulary::from_tokenizer(tokenizer_); });
  return vocabulary_;
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(ConstraintKind kind, const std::string& source,
                                                                   const std::string& path) {
  return get(std::to_string(static_cast<int>(kind)) + ":" + source, [&] { return constraint_grammar(kind, source, path); });
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const std::string& key,
                                                                   const std::function<Expected<Grammar>()>& build) {
  {
    std::lock_guard lock(mu_);
    auto it = grammars_.find(key);
    if (it != grammars_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      ++stats_.hits;
      return it->second.first;
    }
  }
  KILN_ASSIGN_OR_RETURN(Grammar g, build());
  KILN_ASSIGN_OR_RETURN(auto compiled, CompiledGrammar::compile(g, vocabulary()));
  std::lock_guard lock(mu_);
  ++stats_.misses;
  auto it = grammars_.find(key);
  if (it != grammars_.end()) return it->second.first;
  order_.push_front(key);
  grammars_.emplace(key, std::make_pair(compiled, order_.begin()));
  while (grammars_.size() > capacity_) {
    grammars_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

}  // namespace kiln::llm::structured
