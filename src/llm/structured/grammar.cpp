#include "llm/structured/grammar.h"

#include <algorithm>
#include <cstdio>

namespace kiln::llm::structured {
namespace {

std::string grammar_byte_text(uint8_t b) {
  if (b >= 0x21 && b < 0x7f && b != '\\' && b != ']' && b != '-' && b != '[' && b != '^' && b != '"') {
    return std::string(1, static_cast<char>(b));
  }
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  return buf;
}

}  // namespace

Expr Expr::bytes(uint8_t lo, uint8_t hi) {
  Expr e;
  e.kind = Kind::kBytes;
  e.lo = lo;
  e.hi = hi;
  return e;
}

Expr Expr::literal(std::string_view text) {
  std::vector<Expr> kids;
  kids.reserve(text.size());
  for (char c : text) kids.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(kids));
}

namespace {

// strings[begin, end) share their first `depth` bytes and are sorted.
Expr literal_set_from(const std::vector<std::string>& strings, size_t begin, size_t end, size_t depth) {
  // A prefix all of them share (none ending inside it) is a literal, without recursing per byte.
  std::string shared;
  while (true) {
    const std::string& first = strings[begin];
    if (first.size() == depth) break;
    bool all = true;
    for (size_t k = begin + 1; k < end && all; ++k) all = strings[k].size() > depth && strings[k][depth] == first[depth];
    if (!all) break;
    shared += first[depth];
    ++depth;
  }
  if (!shared.empty()) return Expr::seq({Expr::literal(shared), literal_set_from(strings, begin, end, depth)});
  std::vector<Expr> alts;
  std::vector<uint8_t> last_bytes;  // groups that end right after their byte: merged into ranges
  bool empty = false;
  size_t i = begin;
  while (i < end) {
    if (strings[i].size() == depth) {
      empty = true;
      ++i;
      continue;
    }
    const char c = strings[i][depth];
    size_t j = i;
    while (j < end && strings[j].size() > depth && strings[j][depth] == c) ++j;
    if (j == i + 1 && strings[i].size() == depth + 1) {
      last_bytes.push_back(static_cast<uint8_t>(c));
    } else {
      alts.push_back(Expr::seq({Expr::byte(static_cast<uint8_t>(c)), literal_set_from(strings, i, j, depth + 1)}));
    }
    i = j;
  }
  for (size_t k = 0; k < last_bytes.size();) {
    size_t m = k;
    while (m + 1 < last_bytes.size() && last_bytes[m + 1] == last_bytes[m] + 1) ++m;
    alts.push_back(Expr::bytes(last_bytes[k], last_bytes[m]));
    k = m + 1;
  }
  if (empty) alts.push_back(Expr::empty());
  return Expr::alt(std::move(alts));
}

}  // namespace

Expr Expr::literal_set(std::vector<std::string> strings) {
  std::sort(strings.begin(), strings.end());
  strings.erase(std::unique(strings.begin(), strings.end()), strings.end());
  if (strings.empty()) return alt({});
  return literal_set_from(strings, 0, strings.size(), 0);
}

Expr Expr::ref(int32_t rule) {
  Expr e;
  e.kind = Kind::kRule;
  e.rule = rule;
  return e;
}

Expr Expr::seq(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::kSeq;
  e.kids = std::move(kids);
  return e;
}

Expr Expr::alt(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::kAlt;
  e.kids = std::move(kids);
  return e;
}

Expr Expr::repeat(Expr kid, int32_t min, int32_t max) {
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.kids.push_back(std::move(kid));
  return e;
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules.size(); ++r) {
    out += rules[r].name + "#" + std::to_string(r) + " ::=";
    for (size_t a = 0; a < rules[r].alternatives.size(); ++a) {
      if (a) out += " |";
      if (rules[r].alternatives[a].empty()) out += " \"\"";
      for (const GrammarItem& item : rules[r].alternatives[a]) {
        if (item.kind == GrammarItem::Kind::kRule) {
          out += " " + rules[static_cast<size_t>(item.rule)].name + "#" + std::to_string(item.rule);
        } else if (item.lo == item.hi) {
          out += " [" + grammar_byte_text(item.lo) + "]";
        } else {
          out += " [" + grammar_byte_text(item.lo) + "-" + grammar_byte_text(item.hi) + "]";
        }
      }
    }
    out += "\n";
  }
  return out;
}

int32_t GrammarBuilder::declare(std::string name) {
  if (grammar_.rules.size() >= kMaxGrammarRules && !error_) {
    error_ = "the grammar needs more than " + std::to_string(kMaxGrammarRules) + " rules";
  }
  grammar_.rules.push_back(GrammarRule{std::move(name), {}});
  defined_.push_back(false);
  return static_cast<int32_t>(grammar_.rules.size() - 1);
}

void GrammarBuilder::define(int32_t rule, const Expr& e) {
  const std::string owner = grammar_.rules[static_cast<size_t>(rule)].name;
  std::vector<std::vector<GrammarItem>> alternatives;
  if (e.kind == Expr::Kind::kAlt) {
    for (const Expr& kid : e.kids) alternatives.push_back(lower_sequence(kid, owner));
  } else {
    alternatives.push_back(lower_sequence(e, owner));
  }
  grammar_.rules[static_cast<size_t>(rule)].alternatives = std::move(alternatives);
  defined_[static_cast<size_t>(rule)] = true;
}

std::vector<GrammarItem> GrammarBuilder::lower_sequence(const Expr& e, const std::string& owner) {
  std::vector<GrammarItem> out;
  lower_into(e, owner, out);
  return out;
}

void GrammarBuilder::lower_into(const Expr& e, const std::string& owner, std::vector<GrammarItem>& out) {
  switch (e.kind) {
    case Expr::Kind::kBytes:
      ++items_;
      out.push_back(GrammarItem{GrammarItem::Kind::kBytes, e.lo, e.hi, -1});
      return;
    case Expr::Kind::kRule:
      out.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, e.rule});
      return;
    case Expr::Kind::kSeq:
      for (const Expr& kid : e.kids) lower_into(kid, owner, out);
      return;
    case Expr::Kind::kAlt: {
      const int32_t r = declare(owner + "_alt");
      define(r, e);
      out.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, r});
      return;
    }
    case Expr::Kind::kRepeat: {
      if (e.min < 0 || e.min > kMaxRepeat || e.max > kMaxRepeat || (e.max >= 0 && e.max < e.min)) {
        if (!error_) {
          error_ = "rule '" + owner + "': a repetition {" + std::to_string(e.min) + "," + std::to_string(e.max) +
                   "} is out of range (bounds in [0, " + std::to_string(kMaxRepeat) + "], min <= max)";
        }
        return;
      }
      const Expr& kid = e.kids[0];
      // The kid as items once: an alternation becomes one rule that every copy references.
      std::vector<GrammarItem> once = lower_sequence(kid, owner);
      items_ += once.size() * static_cast<size_t>(e.min);
      if (items_ > kMaxGrammarItems) {
        if (!error_) error_ = "the grammar needs more than " + std::to_string(kMaxGrammarItems) + " items";
        return;
      }
      for (int32_t i = 0; i < e.min; ++i) out.insert(out.end(), once.begin(), once.end());
      if (e.max == e.min) return;
      if (e.max < 0) {
        const int32_t star = declare(owner + "_star");
        std::vector<GrammarItem> loop = once;
        loop.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, star});
        grammar_.rules[static_cast<size_t>(star)].alternatives = {std::move(loop), {}};
        defined_[static_cast<size_t>(star)] = true;
        out.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, star});
        return;
      }
      // opt_1 ::= kid | "" ; opt_k ::= kid opt_{k-1} | ""
      int32_t inner = -1;
      for (int32_t k = 1; k <= e.max - e.min; ++k) {
        const int32_t opt = declare(owner + "_opt");
        std::vector<GrammarItem> body = once;
        if (inner >= 0) body.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, inner});
        grammar_.rules[static_cast<size_t>(opt)].alternatives = {std::move(body), {}};
        defined_[static_cast<size_t>(opt)] = true;
        inner = opt;
      }
      out.push_back(GrammarItem{GrammarItem::Kind::kRule, 0, 0, inner});
      return;
    }
  }
}

Expected<Grammar> GrammarBuilder::build(int32_t root) {
  if (error_) return invalid_argument(*error_);
  const size_t n = grammar_.rules.size();
  for (size_t r = 0; r < n; ++r) {
    if (!defined_[r]) return invalid_argument("rule '" + grammar_.rules[r].name + "' is used but never defined");
  }
  // Nullable rules, to a fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : grammar_.rules[r].alternatives) {
        bool all = true;
        for (const GrammarItem& item : alt) {
          if (item.kind == GrammarItem::Kind::kBytes || !nullable[static_cast<size_t>(item.rule)]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Productive rules (some alternative ends after finitely many bytes), to a fixed point. The
  // matcher relies on it: whatever a rule's caller continues with can always be completed.
  std::vector<bool> productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const auto& alt : grammar_.rules[r].alternatives) {
        bool all = true;
        for (const GrammarItem& item : alt) {
          if (item.kind == GrammarItem::Kind::kRule && !productive[static_cast<size_t>(item.rule)]) {
            all = false;
            break;
          }
        }
        if (all) {
          productive[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (!productive[r]) {
      return invalid_argument("rule '" + grammar_.rules[r].name +
                              "' matches nothing (it has no alternative, or every alternative needs it again)");
    }
  }
  // Left edges: r -> s when s can start r without a byte before it. A cycle is left recursion.
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : grammar_.rules[r].alternatives) {
      for (const GrammarItem& item : alt) {
        if (item.kind == GrammarItem::Kind::kBytes) break;
        left[r].push_back(item.rule);
        if (!nullable[static_cast<size_t>(item.rule)]) break;
      }
    }
  }
  // Depth-first, with an explicit stack (a chain of rules may be long).
  std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::optional<std::string> cycle;
  std::vector<std::pair<int32_t, size_t>> path;  // rule, next edge
  for (size_t r0 = 0; r0 < n && !cycle; ++r0) {
    if (mark[r0] != 0) continue;
    mark[r0] = 1;
    path.push_back({static_cast<int32_t>(r0), 0});
    while (!path.empty() && !cycle) {
      auto& [r, next] = path.back();
      const auto& edges = left[static_cast<size_t>(r)];
      if (next == edges.size()) {
        mark[static_cast<size_t>(r)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t s = edges[next++];
      if (mark[static_cast<size_t>(s)] == 1) {
        std::string text;
        bool on = false;
        for (const auto& [p, unused] : path) {
          if (p == s) on = true;
          if (on) text += grammar_.rules[static_cast<size_t>(p)].name + " -> ";
        }
        cycle = text + grammar_.rules[static_cast<size_t>(s)].name;
      } else if (mark[static_cast<size_t>(s)] == 0) {
        mark[static_cast<size_t>(s)] = 1;
        path.push_back({s, 0});
      }
    }
  }
  if (cycle) {
    return invalid_argument("the grammar is left-recursive (" + *cycle +
                            " without reading a byte); write the repetition on the right, or repeat something "
                            "that cannot be empty");
  }
  Grammar g = grammar_;
  g.root = root;
  return g;
}

}  // namespace kiln::llm::structured
