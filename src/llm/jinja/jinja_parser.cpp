#include "llm/jinja/jinja_parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "llm/jinja/jinja_builtins.h"

namespace kiln::llm::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Expected<Body> parse_all() {
    std::string end_tag;
    KILN_ASSIGN_OR_RETURN(Body body, subparse({}, &end_tag));
    return body;
  }

 private:
  // RAII depth guard for recursive descent.
  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    int& depth;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kData: return "template text";
      case TokenType::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  Status error(const Token& t, const std::string& message) const {
    return template_error(t.line, t.column, message);
  }
  Status unexpected(const std::string& expected) const {
    return error(cur(), "unexpected " + describe(cur()) + ", expected " + expected);
  }
  Status expect_op(const char* op) {
    if (!skip_op(op)) return unexpected(std::string("'") + op + "'");
    return Status::ok();
  }
  Status expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) return unexpected("end of statement block '%}'");
    next();
    return Status::ok();
  }
  Expected<std::string> expect_identifier() {
    if (cur().type != TokenType::kName) return unexpected("a name");
    std::string name = cur().text;
    next();
    return name;
  }
  Status check_depth(const Token& at) const {
    if (depth_ > kMaxParseDepth) {
      return error(at, "template nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)");
    }
    return Status::ok();
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Parses statements until `{% <one of end_names>`; leaves the end name as the current token.
  Expected<Body> subparse(const std::set<std::string>& end_names, std::string* end_tag) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (!end_names.empty()) {
          std::string names;
          for (const auto& n : end_names) names += (names.empty() ? "'" : " or '") + n + "'";
          return error(t, "unexpected end of template, expected " + names);
        }
        return body;
      }
      if (t.type == TokenType::kData) {
        auto s = make_stmt(Stmt::Kind::kText, t);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVarBegin) {
        next();
        auto s = make_stmt(Stmt::Kind::kOutput, t);
        KILN_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, true));
        if (cur().type != TokenType::kVarEnd) return unexpected("end of print statement '}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        next();
        if (cur().type == TokenType::kName && end_names.count(cur().text) != 0) {
          *end_tag = cur().text;
          return body;
        }
        KILN_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        body.push_back(std::move(s));
      } else {
        return error(t, "unexpected " + describe(t));
      }
    }
  }

  Expected<Body> parse_block_body(const std::string& end_name) {
    std::string end_tag;
    KILN_ASSIGN_OR_RETURN(Body body, subparse({end_name}, &end_tag));
    next();  // the end name
    KILN_RETURN_IF_ERROR(expect_block_end());
    return body;
  }

  Expected<StmtPtr> parse_statement() {
    DepthGuard guard(depth_);
    const Token& t = cur();
    KILN_RETURN_IF_ERROR(check_depth(t));
    if (t.type != TokenType::kName) return error(t, "tag name expected");
    std::string name = t.text;
    next();
    if (name == "if") return parse_if(t);
    if (name == "for") return parse_for(t);
    if (name == "set") return parse_set(t);
    if (name == "macro") return parse_macro(t);
    if (name == "call") return parse_call_block(t);
    if (name == "filter") return parse_filter_block(t);
    if (name == "with") return parse_with(t);
    if (name == "generation") {
      auto s = make_stmt(Stmt::Kind::kScope, t);
      KILN_RETURN_IF_ERROR(expect_block_end());
      KILN_ASSIGN_OR_RETURN(Body body, parse_block_body("endgeneration"));
      s->bodies.push_back(std::move(body));
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return error(t, "'" + name + "' outside of a loop");
      auto s = make_stmt(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, t);
      KILN_RETURN_IF_ERROR(expect_block_end());
      return s;
    }
    static const std::set<std::string> kUnsupported = {"include", "extends", "block", "import", "from",
                                                       "autoescape", "do", "trans"};
    if (kUnsupported.count(name) != 0) {
      return error(t, "the '" + name + "' tag is not supported in chat templates");
    }
    return error(t, "unknown tag '" + name + "'");
  }

  Expected<StmtPtr> parse_if(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kIf, at);
    while (true) {
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false, false));
      KILN_RETURN_IF_ERROR(expect_block_end());
      std::string end_tag;
      KILN_ASSIGN_OR_RETURN(Body body, subparse({"elif", "else", "endif"}, &end_tag));
      s->conditions.push_back(std::move(cond));
      s->bodies.push_back(std::move(body));
      next();
      if (end_tag == "elif") continue;
      if (end_tag == "else") {
        KILN_RETURN_IF_ERROR(expect_block_end());
        KILN_ASSIGN_OR_RETURN(s->else_body, parse_block_body("endif"));
      } else {
        KILN_RETURN_IF_ERROR(expect_block_end());
      }
      return s;
    }
  }

  // Assignment targets: `a`, `a, b`, `(a, b)`.
  Expected<std::vector<std::string>> parse_targets() {
    std::vector<std::string> names;
    bool parens = skip_op("(");
    while (true) {
      KILN_ASSIGN_OR_RETURN(std::string n, expect_identifier());
      names.push_back(n);
      if (!skip_op(",")) break;
      if (parens && is_op(")")) break;
      if (cur().type != TokenType::kName || is_name("in")) break;
    }
    if (parens) KILN_RETURN_IF_ERROR(expect_op(")"));
    return names;
  }

  Expected<StmtPtr> parse_for(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFor, at);
    KILN_ASSIGN_OR_RETURN(s->targets, parse_targets());
    if (!skip_name("in")) return unexpected("'in'");
    KILN_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false));
    if (skip_name("if")) {
      KILN_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
    }
    if (is_name("recursive")) return error(cur(), "recursive loops are not supported in chat templates");
    KILN_RETURN_IF_ERROR(expect_block_end());
    ++loop_depth_;
    std::string end_tag;
    auto body = subparse({"endfor", "else"}, &end_tag);
    --loop_depth_;
    if (!body.has_value()) return body.status();
    s->bodies.push_back(std::move(body).value());
    next();
    KILN_RETURN_IF_ERROR(expect_block_end());
    if (end_tag == "else") {
      KILN_ASSIGN_OR_RETURN(s->else_body, parse_block_body("endfor"));
    }
    return s;
  }

  Expected<StmtPtr> parse_set(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kSet, at);
    KILN_ASSIGN_OR_RETURN(std::string first, expect_identifier());
    s->targets.push_back(first);
    if (skip_op(".")) {
      KILN_ASSIGN_OR_RETURN(s->attr, expect_identifier());
    } else {
      while (skip_op(",")) {
        KILN_ASSIGN_OR_RETURN(std::string n, expect_identifier());
        s->targets.push_back(n);
      }
    }
    if (skip_op("=")) {
      KILN_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, false));
      KILN_RETURN_IF_ERROR(expect_block_end());
      return s;
    }
    if (s->targets.size() != 1 || !s->attr.empty()) return unexpected("'='");
    s->kind = Stmt::Kind::kSetBlock;
    if (is_op("|")) {
      KILN_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, true));
    }
    KILN_RETURN_IF_ERROR(expect_block_end());
    KILN_ASSIGN_OR_RETURN(Body body, parse_block_body("endset"));
    s->bodies.push_back(std::move(body));
    return s;
  }

  Expected<std::vector<MacroParam>> parse_params() {
    std::vector<MacroParam> params;
    KILN_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!params.empty()) KILN_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
      MacroParam p;
      KILN_ASSIGN_OR_RETURN(p.name, expect_identifier());
      if (skip_op("=")) {
        KILN_ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
      }
      params.push_back(std::move(p));
    }
    next();
    return params;
  }

  Expected<StmtPtr> parse_macro(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kMacro, at);
    KILN_ASSIGN_OR_RETURN(std::string name, expect_identifier());
    s->targets.push_back(name);
    KILN_ASSIGN_OR_RETURN(s->params, parse_params());
    KILN_RETURN_IF_ERROR(expect_block_end());
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_block_body("endmacro");
    loop_depth_ = saved_loops;
    if (!body.has_value()) return body.status();
    s->bodies.push_back(std::move(body).value());
    return s;
  }

  Expected<StmtPtr> parse_call_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kCallBlock, at);
    if (is_op("(")) {
      KILN_ASSIGN_OR_RETURN(s->params, parse_params());
    }
    KILN_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    if (s->expr->kind != Expr::Kind::kCall) return error(at, "expected a call after 'call'");
    KILN_RETURN_IF_ERROR(expect_block_end());
    KILN_ASSIGN_OR_RETURN(Body body, parse_block_body("endcall"));
    s->bodies.push_back(std::move(body));
    return s;
  }

  Expected<StmtPtr> parse_filter_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFilterBlock, at);
    KILN_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, true));
    KILN_RETURN_IF_ERROR(expect_block_end());
    KILN_ASSIGN_OR_RETURN(Body body, parse_block_body("endfilter"));
    s->bodies.push_back(std::move(body));
    return s;
  }

  Expected<StmtPtr> parse_with(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kWith, at);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) KILN_RETURN_IF_ERROR(expect_op(","));
      KILN_ASSIGN_OR_RETURN(std::string name, expect_identifier());
      KILN_RETURN_IF_ERROR(expect_op("="));
      KILN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      s->targets.push_back(name);
      s->exprs.push_back(std::move(value));
    }
    next();
    KILN_ASSIGN_OR_RETURN(Body body, parse_block_body("endwith"));
    s->bodies.push_back(std::move(body));
    return s;
  }

  // ---- expressions ----

  bool at_tuple_end() const {
    const Token& t = cur();
    return t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof ||
           (t.type == TokenType::kOperator && t.text == ")") ||
           (t.type == TokenType::kName && (t.text == "if" || t.text == "recursive"));
  }

  Expected<ExprPtr> parse_tuple(bool with_condexpr, bool allow_empty_parens) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) KILN_RETURN_IF_ERROR(expect_op(","));
      if (at_tuple_end()) break;
      KILN_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!allow_empty_parens) return unexpected("an expression");
    }
    auto e = make(Expr::Kind::kTuple, at);
    e->args = std::move(items);
    return e;
  }

  Expected<ExprPtr> parse_expression(bool with_condexpr) {
    DepthGuard guard(depth_);
    KILN_RETURN_IF_ERROR(check_depth(cur()));
    if (!with_condexpr) return parse_or();
    KILN_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    while (is_name("if")) {
      const Token& at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        KILN_ASSIGN_OR_RETURN(otherwise, parse_expression(true));
      }
      auto e = make(Expr::Kind::kCondition, at);
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr lhs, ExprPtr rhs, const Token& at) {
    auto e = make(Expr::Kind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(lhs));
    e->args.push_back(std::move(rhs));
    return e;
  }

  Expected<ExprPtr> parse_or() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_and());
    while (is_name("or")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_and());
      lhs = binary("or", std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_and() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_not());
    while (is_name("and")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_not());
      lhs = binary("and", std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_not() {
    if (is_name("not")) {
      DepthGuard guard(depth_);
      Token at = cur();
      KILN_RETURN_IF_ERROR(check_depth(at));
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      auto e = make(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(std::move(operand));
      return e;
    }
    return parse_compare();
  }

  Expected<ExprPtr> parse_compare() {
    Token at = cur();
    KILN_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr e;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!e) {
        e = make(Expr::Kind::kCompare, at);
        e->args.push_back(std::move(first));
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
      e->ops.push_back(op);
      e->args.push_back(std::move(rhs));
    }
    if (!e) return first;
    return e;
  }

  Expected<ExprPtr> parse_math1() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_concat());
    while (is_op("+") || is_op("-")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_concat());
      lhs = binary(at.text, std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_concat() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_math2());
    while (is_op("~")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math2());
      lhs = binary("~", std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_math2() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_pow());
      lhs = binary(at.text, std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_pow() {
    KILN_ASSIGN_OR_RETURN(ExprPtr lhs, parse_unary(true));
    while (is_op("**")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr rhs, parse_unary(true));
      lhs = binary("**", std::move(lhs), std::move(rhs), at);
    }
    return lhs;
  }

  Expected<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard guard(depth_);
    KILN_RETURN_IF_ERROR(check_depth(cur()));
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      Token at = cur();
      next();
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      node = make(Expr::Kind::kUnary, at);
      node->name = at.text;
      node->args.push_back(std::move(operand));
    } else {
      KILN_ASSIGN_OR_RETURN(node, parse_primary());
    }
    KILN_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      KILN_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Expected<ExprPtr> parse_primary() {
    const Token at = cur();
    switch (at.type) {
      case TokenType::kName: {
        next();
        auto e = make(Expr::Kind::kLiteral, at);
        if (at.text == "true" || at.text == "True") {
          e->literal = Value(true);
        } else if (at.text == "false" || at.text == "False") {
          e->literal = Value(false);
        } else if (at.text == "none" || at.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = at.text;
        }
        return e;
      }
      case TokenType::kString: {
        std::string text;
        while (cur().type == TokenType::kString) {
          text += cur().text;
          next();
        }
        auto e = make(Expr::Kind::kLiteral, at);
        e->literal = Value(std::move(text));
        return e;
      }
      case TokenType::kInt: {
        next();
        int64_t v = 0;
        auto res = std::from_chars(at.text.data(), at.text.data() + at.text.size(), v);
        auto e = make(Expr::Kind::kLiteral, at);
        if (res.ec != std::errc()) return error(at, "integer literal out of range: " + at.text);
        e->literal = Value(v);
        return e;
      }
      case TokenType::kFloat: {
        next();
        auto e = make(Expr::Kind::kLiteral, at);
        e->literal = Value(std::strtod(at.text.c_str(), nullptr));
        return e;
      }
      case TokenType::kOperator: {
        if (at.text == "(") {
          next();
          KILN_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple(true, true));
          KILN_RETURN_IF_ERROR(expect_op(")"));
          return inner;
        }
        if (at.text == "[") {
          next();
          auto e = make(Expr::Kind::kList, at);
          while (!is_op("]")) {
            if (!e->args.empty()) KILN_RETURN_IF_ERROR(expect_op(","));
            if (is_op("]")) break;
            KILN_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
            e->args.push_back(std::move(item));
          }
          next();
          return e;
        }
        if (at.text == "{") {
          next();
          auto e = make(Expr::Kind::kDict, at);
          while (!is_op("}")) {
            if (!e->args.empty()) KILN_RETURN_IF_ERROR(expect_op(","));
            if (is_op("}")) break;
            KILN_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
            KILN_RETURN_IF_ERROR(expect_op(":"));
            KILN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
            e->args.push_back(std::move(key));
            e->args.push_back(std::move(value));
          }
          next();
          return e;
        }
        break;
      }
      default: break;
    }
    return unexpected("an expression");
  }

  Expected<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      Token at = cur();
      if (is_op(".")) {
        next();
        if (cur().type == TokenType::kName) {
          auto e = make(Expr::Kind::kGetAttr, at);
          e->name = cur().text;
          e->args.push_back(std::move(node));
          node = std::move(e);
          next();
        } else if (cur().type == TokenType::kInt) {
          auto e = make(Expr::Kind::kGetItem, at);
          e->args.push_back(std::move(node));
          auto index = make(Expr::Kind::kLiteral, cur());
          index->literal = Value(static_cast<int64_t>(std::strtoll(cur().text.c_str(), nullptr, 10)));
          e->args.push_back(std::move(index));
          node = std::move(e);
          next();
        } else {
          return unexpected("an attribute name");
        }
      } else if (is_op("[")) {
        next();
        KILN_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node), at));
      } else if (is_op("(")) {
        KILN_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Expected<ExprPtr> parse_subscript(ExprPtr node, const Token& at) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        is_slice = true;
        if (++part > 2) return error(cur(), "too many ':' in slice");
        next();
        continue;
      }
      if (parts[part]) return unexpected("']'");
      KILN_ASSIGN_OR_RETURN(parts[part], parse_expression(true));
    }
    next();
    if (!is_slice) {
      if (!parts[0]) return error(at, "empty subscript");
      auto e = make(Expr::Kind::kGetItem, at);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::kSlice, at);
    e->args.push_back(std::move(node));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Parses `(a, b, key=c)` into e->args (appended) and e->kwargs.
  Status parse_call_args(Expr& e) {
    KILN_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) KILN_RETURN_IF_ERROR(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return error(cur(), "'*' and '**' arguments are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        KILN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e.kwargs.emplace_back(key, std::move(value));
      } else {
        if (!e.kwargs.empty()) return error(cur(), "positional argument follows keyword argument");
        KILN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e.args.push_back(std::move(value));
      }
    }
    next();
    return Status::ok();
  }

  Expected<ExprPtr> parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, cur());
    e->args.push_back(std::move(callee));
    KILN_RETURN_IF_ERROR(parse_call_args(*e));
    return e;
  }

  Expected<ExprPtr> parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      Token at = cur();
      KILN_ASSIGN_OR_RETURN(std::string name, expect_identifier());
      while (skip_op(".")) {
        KILN_ASSIGN_OR_RETURN(std::string part, expect_identifier());
        name += "." + part;
      }
      if (!has_filter(name)) return error(at, "unknown filter '" + name + "'");
      auto e = make(Expr::Kind::kFilter, at);
      e->name = name;
      e->args.push_back(std::move(node));
      if (is_op("(")) KILN_RETURN_IF_ERROR(parse_call_args(*e));
      node = std::move(e);
    }
    return node;
  }

  Expected<ExprPtr> parse_test(ExprPtr node) {
    Token at = cur();
    next();  // `is`
    bool negated = skip_name("not");
    KILN_ASSIGN_OR_RETURN(std::string name, expect_identifier());
    while (skip_op(".")) {
      KILN_ASSIGN_OR_RETURN(std::string part, expect_identifier());
      name += "." + part;
    }
    if (!has_test(name)) return error(at, "unknown test '" + name + "'");
    auto e = make(Expr::Kind::kTest, at);
    e->name = name;
    e->negated = negated;
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      KILN_RETURN_IF_ERROR(parse_call_args(*e));
    } else {
      const Token& t = cur();
      bool takes_arg = t.type == TokenType::kString || t.type == TokenType::kInt || t.type == TokenType::kFloat ||
                       (t.type == TokenType::kName && t.text != "else" && t.text != "or" && t.text != "and") ||
                       (t.type == TokenType::kOperator && (t.text == "[" || t.text == "{"));
      if (takes_arg) {
        KILN_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
        KILN_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
        e->args.push_back(std::move(arg));
      }
    }
    return e;
  }

  Expected<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        KILN_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
      } else if (is_name("is")) {
        KILN_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
      } else if (is_op("(")) {
        KILN_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Expected<Body> parse_template(std::string_view source) {
  KILN_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  return Parser(std::move(tokens)).parse_all();
}

}  // namespace kiln::llm::jinja
