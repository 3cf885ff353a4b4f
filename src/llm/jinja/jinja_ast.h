// The syntax tree of a parsed Jinja template. Built once by the parser, then only read: the
// interpreter never mutates it, so one tree serves renders on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llm/jinja/jinja_value.h"

namespace kiln::llm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // [args...]
    kTuple,     // (args...)
    kDict,      // {args[0]: args[1], ...} (pairs)
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null = omitted)
    kCall,      // args[0](args[1:]..., kwargs)
    kFilter,    // args[0] | name(args[1:]..., kwargs); args[0] null inside {% filter %}
    kTest,      // args[0] is [not] name(args[1:]..., kwargs)
    kUnary,     // name in {"-", "+", "not"} args[0]
    kBinary,    // args[0] name args[1]; name in {+ - * / // % ** ~ and or}
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // `is not`
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none given
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conditions[i] -> bodies[i]; else_body
    kFor,          // for targets in expr [if filter] body [else else_body]
    kSet,          // set targets = expr  (target "ns.attr" when attr is set)
    kSetBlock,     // set target %}body{% endset  (expr: optional filter chain)
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr %}body{% endcall
    kFilterBlock,  // filter expr %}body{% endfilter
    kWith,         // with targets[i] = exprs[i] %}body{% endwith
    kBreak,
    kContinue,
    kScope,        // a body rendered as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;                    // for: the `if` clause
  std::vector<std::string> targets;  // for/set/with names
  std::string attr;                  // set ns.attr
  std::vector<ExprPtr> conditions;   // if/elif
  std::vector<ExprPtr> exprs;        // with
  std::vector<Body> bodies;          // if branches, or bodies[0] for other block statements
  Body else_body;
  std::vector<MacroParam> params;
};

}  // namespace kiln::llm::jinja
