// Grammar: the constraint engine's intermediate form, a context-free grammar over bytes. A rule
// is a list of alternatives; an alternative is a sequence of items, each a byte range [lo, hi]
// or a reference to a rule; an empty alternative matches the empty string. Every front end (the
// text grammar of ebnf_parser.h, regexes of regex_parser.h, JSON Schema of json_schema.h) builds
// Exprs, regular-expression-like trees with repetition, and GrammarBuilder lowers them to rules:
// an alternation inside a sequence becomes a rule of its own, `x{m,n}` becomes m copies of x and
// n - m nested optional rules, `x*` the right-recursive rule R ::= x R | "". Right recursion is
// what the matcher runs in constant stack depth (a reference at the end of a sequence is a tail
// call); left recursion is refused when the grammar is built.
//
// A Grammar is plain data, built once and then read only (compiled_grammar.h flattens it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::llm::structured {

struct GrammarItem {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint8_t lo = 0;    // kBytes: the range [lo, hi]
  uint8_t hi = 0;
  int32_t rule = -1;  // kRule
};

struct GrammarRule {
  std::string name;
  std::vector<std::vector<GrammarItem>> alternatives;
};

struct Grammar {
  std::vector<GrammarRule> rules;
  int32_t root = 0;
  // The grammar in the text syntax of ebnf_parser.h (byte ranges as [\xHH-\xHH]): for tests and logs.
  std::string to_string() const;
};

// A tree the front ends build; GrammarBuilder lowers it to rules.
struct Expr {
  enum class Kind : uint8_t { kBytes, kRule, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  uint8_t lo = 0, hi = 0;  // kBytes
  int32_t rule = -1;       // kRule
  int32_t min = 0;         // kRepeat: kids[0] repeated min..max times
  int32_t max = 0;         // kRepeat: -1 = unbounded
  std::vector<Expr> kids;  // kSeq, kAlt, kRepeat

  static Expr bytes(uint8_t lo, uint8_t hi);
  static Expr byte(uint8_t b) { return bytes(b, b); }
  static Expr literal(std::string_view text);  // its bytes in sequence
  static Expr ref(int32_t rule);
  static Expr seq(std::vector<Expr> kids);
  static Expr alt(std::vector<Expr> kids);  // no kids: matches nothing
  static Expr repeat(Expr kid, int32_t min, int32_t max);
  static Expr optional(Expr kid) { return repeat(std::move(kid), 0, 1); }
  static Expr empty() { return seq({}); }
  // Any one of `strings`, written as a trie: common prefixes once and single bytes merged into
  // ranges, so that the matcher keeps one stack where a flat alternation would keep one per string.
  static Expr literal_set(std::vector<std::string> strings);
};

// Repetition bounds above this are refused: {m,n} is unrolled into rules.
inline constexpr int32_t kMaxRepeat = 4096;
// Limits on what one grammar may become, so that a request cannot make the server build (or
// recurse through) something huge: rules, items in all alternatives, and nesting of groups in
// the text syntaxes and of schemas.
inline constexpr size_t kMaxGrammarRules = 1 << 15;
inline constexpr size_t kMaxGrammarItems = 1 << 20;
inline constexpr int32_t kMaxGrammarNesting = 128;

class GrammarBuilder {
 public:
  // A new rule without alternatives; define() gives it some. Names need not be unique.
  int32_t declare(std::string name);
  // The rule's alternatives become `e`'s top-level alternatives (an Alt's kids, or `e` itself).
  void define(int32_t rule, const Expr& e);
  int32_t add(std::string name, const Expr& e) {
    const int32_t r = declare(std::move(name));
    define(r, e);
    return r;
  }
  bool defined(int32_t rule) const { return defined_[static_cast<size_t>(rule)]; }
  size_t num_rules() const { return grammar_.rules.size(); }

  // The grammar rooted at `root`. Refuses a rule that was declared but never defined, a
  // repetition beyond kMaxRepeat and left recursion (a rule that can reach itself without
  // consuming a byte), each with a message naming the rule.
  Expected<Grammar> build(int32_t root);

 private:
  void lower_into(const Expr& e, const std::string& owner, std::vector<GrammarItem>& out);
  std::vector<GrammarItem> lower_sequence(const Expr& e, const std::string& owner);

  Grammar grammar_;
  std::vector<bool> defined_;
  size_t items_ = 0;
  std::optional<std::string> error_;
};

}  // namespace kiln::llm::structured
