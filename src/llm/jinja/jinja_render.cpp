#include "llm/jinja/jinja_render.h"

#include <cmath>
#include <limits>

#include "llm/jinja/jinja_builtins.h"
#include "llm/jinja/jinja_lexer.h"

namespace kiln::llm::jinja {
namespace {

constexpr std::string_view kLocated = "chat template line ";

Status locate(const Status& status, int line, int column) {
  if (status.message().rfind(kLocated, 0) == 0) return status;
  return template_error(line, column, status.message());
}

Status type_error(const std::string& op, const Value& a, const Value& b) {
  return invalid_argument("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                          b.type_name() + "'");
}

Expected<Value> checked_int(Int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    return invalid_argument("integer result out of the supported 64-bit range");
  }
  return Value(static_cast<int64_t>(v));
}

Expected<Value> repeat(const Value& seq, int64_t times, const Interpreter& interp) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    KILN_RETURN_IF_ERROR(interp.check_size(seq.as_string().size() * static_cast<size_t>(times)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  const auto& list = seq.as_list();
  KILN_RETURN_IF_ERROR(interp.check_size(list.items.size() * static_cast<size_t>(times) * sizeof(Value)));
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return Value::list(std::move(items), list.is_tuple);
}

}  // namespace

Status undefined_error(const Value& value) {
  const std::string& hint = value.undefined_hint();
  return invalid_argument(hint.empty() ? "value is undefined" : hint);
}

Expected<Value> binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& interp) {
  if (op == "~") {
    std::string out = to_str(a) + to_str(b);
    KILN_RETURN_IF_ERROR(interp.check_size(out.size()));
    return Value(std::move(out));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat);
  if (op == "+") {
    if (floats) return Value(a.as_double() + b.as_double());
    if (numbers) return checked_int(static_cast<Int128>(a.as_int()) + b.as_int());
    if (a.is_string() && b.is_string()) {
      KILN_RETURN_IF_ERROR(interp.check_size(a.as_string().size() + b.as_string().size()));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string()) {
      return invalid_argument("can only concatenate str (not \"" + b.type_name() + "\") to str");
    }
    if (a.is_list() && !a.as_list().is_tuple) {
      return invalid_argument("can only concatenate list (not \"" + b.type_name() + "\") to list");
    }
    return type_error("+", a, b);
  }
  if (op == "-") {
    if (floats) return Value(a.as_double() - b.as_double());
    if (numbers) return checked_int(static_cast<Int128>(a.as_int()) - b.as_int());
    return type_error("-", a, b);
  }
  if (op == "*") {
    if (floats) return Value(a.as_double() * b.as_double());
    if (numbers) return checked_int(static_cast<Int128>(a.as_int()) * b.as_int());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), interp);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), interp);
    return type_error("*", a, b);
  }
  if (op == "/" || op == "//" || op == "%") {
    if (!numbers) {
      if (op == "%" && a.is_string()) return unimplemented("printf-style '%' formatting of strings is not supported");
      return type_error(op, a, b);
    }
    if ((floats && b.as_double() == 0.0) || (!floats && b.as_int() == 0)) {
      return invalid_argument(op == "%" ? "integer modulo by zero" : "division by zero");
    }
    if (op == "/") return Value(a.as_double() / b.as_double());
    if (floats) {
      double x = a.as_double();
      double y = b.as_double();
      if (op == "//") return Value(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    int64_t x = a.as_int();
    int64_t y = b.as_int();
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      return invalid_argument("integer result out of the supported 64-bit range");
    }
    int64_t q = x / y;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value(op == "//" ? q : r);
  }
  if (op == "**") {
    if (!numbers) return type_error("** or pow()", a, b);
    if (floats || b.as_int() < 0) return Value(std::pow(a.as_double(), b.as_double()));
    Int128 result = 1;
    Int128 base = a.as_int();
    int64_t exponent = b.as_int();
    if (base == 0 || base == 1) return Value(exponent == 0 ? int64_t{1} : static_cast<int64_t>(base));
    if (base == -1) return Value(exponent % 2 == 0 ? int64_t{1} : int64_t{-1});
    for (int64_t e = exponent; e > 0; --e) {  // |base| >= 2 overflows within 64 steps
      result *= base;
      if (result > std::numeric_limits<int64_t>::max() || result < std::numeric_limits<int64_t>::min()) {
        return invalid_argument("integer result out of the supported 64-bit range");
      }
    }
    return Value(static_cast<int64_t>(result));
  }
  return internal_error("unknown operator " + op);
}

Expected<bool> contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!needle.is_string()) {
        return invalid_argument("'in <string>' requires string as left operand, not " + needle.type_name());
      }
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case Kind::kList:
      for (const auto& item : container.as_list().items) {
        if (values_equal(item, needle)) return true;
      }
      return false;
    case Kind::kDict: return container.as_dict().find(needle) != nullptr;
    case Kind::kNamespace: return container.as_namespace().find(to_str(needle)) != nullptr;
    default: return invalid_argument("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value* Interpreter::Scope::find(const std::string& name) {
  for (Scope* s = this; s != nullptr; s = s->parent) {
    for (auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Interpreter::Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Status Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return invalid_argument("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return Status::ok();
}

Status Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return invalid_argument("template exceeded the limit of " + std::to_string(limits_.max_steps) +
                            " evaluation steps");
  }
  return Status::ok();
}

Status Interpreter::append(std::string& out, std::string_view text) const {
  KILN_RETURN_IF_ERROR(check_size(out.size() + text.size()));
  out += text;
  return Status::ok();
}

Expected<std::string> Interpreter::render(const Body& body, std::vector<std::pair<std::string, Value>> context) {
  Scope globals;
  globals.vars = make_globals();
  Scope root;
  root.parent = &globals;
  root.vars = std::move(context);
  root_ = &root;
  std::string out;
  auto flow = exec_body(body, root, out);
  root_ = nullptr;
  if (!flow.has_value()) return flow.status();
  return out;
}

Expected<Interpreter::Flow> Interpreter::exec_body(const Body& body, Scope& scope, std::string& out) {
  for (const auto& stmt : body) {
    KILN_ASSIGN_OR_RETURN(Flow flow, exec(*stmt, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Expected<Interpreter::Flow> Interpreter::exec(const Stmt& stmt, Scope& scope, std::string& out) {
  {
    Status budget = charge(1);
    if (!budget.is_ok()) return locate(budget, stmt.line, stmt.column);
  }
  switch (stmt.kind) {
    case Stmt::Kind::kText: {
      Status s = append(out, stmt.text);
      if (!s.is_ok()) return locate(s, stmt.line, stmt.column);
      return Flow::kNormal;
    }
    case Stmt::Kind::kOutput: {
      KILN_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr, scope));
      Status s = append(out, to_str(v));
      if (!s.is_ok()) return locate(s, stmt.line, stmt.column);
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf: {
      for (size_t i = 0; i < stmt.conditions.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(Value cond, eval(*stmt.conditions[i], scope));
        if (cond.truthy()) return exec_body(stmt.bodies[i], scope, out);
      }
      return exec_body(stmt.else_body, scope, out);
    }
    case Stmt::Kind::kFor: return exec_for(stmt, scope, out);
    case Stmt::Kind::kSet: {
      KILN_RETURN_IF_ERROR(exec_set(stmt, scope));
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      Scope inner;
      inner.parent = &scope;
      std::string text;
      KILN_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.bodies[0], inner, text));
      (void)flow;
      Value value(std::move(text));
      if (stmt.expr) {
        Scope filter_scope;
        filter_scope.parent = &scope;
        filter_scope.set("\x01block", value);
        KILN_ASSIGN_OR_RETURN(value, eval(*stmt.expr, filter_scope));
      }
      scope.set(stmt.targets[0], std::move(value));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: {
      scope.set(stmt.targets[0], make_macro(stmt, nullptr, nullptr));
      return Flow::kNormal;
    }
    case Stmt::Kind::kCallBlock: {
      // The call's `caller()` renders this block's body in the current scope.
      const Expr& call_expr = *stmt.expr;
      KILN_ASSIGN_OR_RETURN(Value callee, eval(*call_expr.args[0], scope));
      KILN_ASSIGN_OR_RETURN(CallArgs args, eval_args(call_expr, scope, 1));
      args.keyword.emplace_back("caller", make_macro(stmt, &scope, &stmt));
      auto result = call(callee, args);
      if (!result.has_value()) return locate(result.status(), call_expr.line, call_expr.column);
      Status s = append(out, to_str(*result));
      if (!s.is_ok()) return locate(s, stmt.line, stmt.column);
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      Scope inner;
      inner.parent = &scope;
      std::string text;
      KILN_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.bodies[0], inner, text));
      (void)flow;
      inner.set("\x01block", Value(std::move(text)));
      KILN_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr, inner));
      Status s = append(out, to_str(v));
      if (!s.is_ok()) return locate(s, stmt.line, stmt.column);
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      Scope inner;
      inner.parent = &scope;
      for (size_t i = 0; i < stmt.targets.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(Value v, eval(*stmt.exprs[i], scope));
        inner.set(stmt.targets[i], std::move(v));
      }
      return exec_body(stmt.bodies[0], inner, out);
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
    case Stmt::Kind::kScope: return exec_body(stmt.bodies[0], scope, out);
  }
  return Flow::kNormal;
}

Status Interpreter::assign(Scope& scope, const std::vector<std::string>& targets, const Value& value,
                           const Stmt& at) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  if (items.size() != targets.size()) {
    return template_error(at.line, at.column,
                          items.size() < targets.size()
                              ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                    ", got " + std::to_string(items.size()) + ")"
                              : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  return Status::ok();
}

Status Interpreter::exec_set(const Stmt& stmt, Scope& scope) {
  KILN_ASSIGN_OR_RETURN(Value value, eval(*stmt.expr, scope));
  if (!stmt.attr.empty()) {
    Value* target = scope.find(stmt.targets[0]);
    if (target == nullptr || target->kind() != Kind::kNamespace) {
      return template_error(stmt.line, stmt.column, "cannot assign attribute on non-namespace object");
    }
    target->as_namespace().set(stmt.attr, std::move(value));
    return Status::ok();
  }
  return assign(scope, stmt.targets, value, stmt);
}

Expected<Interpreter::Flow> Interpreter::exec_for(const Stmt& stmt, Scope& scope, std::string& out) {
  KILN_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.expr, scope));
  auto items_or = iterate(iterable);
  if (!items_or.has_value()) return locate(items_or.status(), stmt.expr->line, stmt.expr->column);
  std::vector<Value> items = std::move(items_or).value();
  if (stmt.filter) {
    std::vector<Value> kept;
    for (const auto& item : items) {
      Scope probe;
      probe.parent = &scope;
      KILN_RETURN_IF_ERROR(assign(probe, stmt.targets, item, stmt));
      KILN_ASSIGN_OR_RETURN(Value keep, eval(*stmt.filter, probe));
      if (keep.truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(stmt.else_body, scope, out);
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    {
      Status budget = charge(1);  // an empty body still costs one step per iteration
      if (!budget.is_ok()) return locate(budget, stmt.line, stmt.column);
    }
    Scope iteration;
    iteration.parent = &scope;
    std::vector<std::pair<Value, Value>> loop = {
        {Value("index"), Value(i + 1)},          {Value("index0"), Value(i)},
        {Value("revindex"), Value(length - i)},  {Value("revindex0"), Value(length - i - 1)},
        {Value("first"), Value(i == 0)},         {Value("last"), Value(i == length - 1)},
        {Value("length"), Value(length)},        {Value("depth"), Value(1)},
        {Value("depth0"), Value(0)},
    };
    if (i > 0) loop.emplace_back(Value("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < length) loop.emplace_back(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
    loop.emplace_back(Value("cycle"), Value::function("cycle", [i](CallArgs& args, Interpreter&) -> Expected<Value> {
                        if (args.positional.empty()) return invalid_argument("no items for cycling given");
                        return args.positional[static_cast<size_t>(i) % args.positional.size()];
                      }));
    iteration.set("loop", Value::dict(std::move(loop)));
    KILN_RETURN_IF_ERROR(assign(iteration, stmt.targets, items[static_cast<size_t>(i)], stmt));
    KILN_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.bodies[0], iteration, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

// A macro (or a call block's `caller`) as a callable value. Macro bodies see the template's
// top-level variables; a caller body sees the scope of its call block.
Value Interpreter::make_macro(const Stmt& stmt, Scope* caller_scope, const Stmt* caller_body) {
  const Stmt* def = &stmt;
  std::string name = caller_body != nullptr ? "caller" : stmt.targets[0];
  return Value::function(name, [def, caller_scope, caller_body](CallArgs& args, Interpreter& interp) -> Expected<Value> {
    if (interp.call_depth_ >= interp.limits_.max_call_depth) {
      return invalid_argument("macro calls nested deeper than " + std::to_string(interp.limits_.max_call_depth));
    }
    Scope scope;
    scope.parent = caller_scope != nullptr ? caller_scope : interp.root_;
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < def->params.size()) {
        scope.set(def->params[i].name, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    std::vector<std::pair<Value, Value>> kwargs;
    for (auto& [key, value] : args.keyword) {
      bool is_param = false;
      for (const auto& p : def->params) is_param = is_param || p.name == key;
      if (is_param || key == "caller") {
        scope.set(key, value);
      } else {
        kwargs.emplace_back(Value(key), value);
      }
    }
    for (const auto& p : def->params) {
      bool bound = false;
      for (const auto& [k, v] : scope.vars) bound = bound || k == p.name;
      if (bound) continue;
      if (p.default_value) {
        KILN_ASSIGN_OR_RETURN(Value v, interp.eval(*p.default_value, scope));
        scope.set(p.name, std::move(v));
      } else {
        scope.set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
      }
    }
    scope.set("varargs", Value::list(std::move(varargs), true));
    scope.set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    ++interp.call_depth_;
    auto flow = interp.exec_body(def->bodies[0], scope, out);
    --interp.call_depth_;
    if (!flow.has_value()) return flow.status();
    return Value(std::move(out));
  });
}

Expected<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return undefined_error(callee);
  if (callee.kind() != Kind::kCallable) return invalid_argument("'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().fn(args, *this);
}

Expected<Value> Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (!has_filter(name)) return invalid_argument("unknown filter '" + name + "'");
  KILN_RETURN_IF_ERROR(charge(1));
  return call_filter(name, input, args, *this);
}

Expected<bool> Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  if (!has_test(name)) return invalid_argument("unknown test '" + name + "'");
  KILN_RETURN_IF_ERROR(charge(1));
  return call_test(name, input, args, *this);
}

Expected<CallArgs> Interpreter::eval_args(const Expr& expr, Scope& scope, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.args.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Value v, eval(*expr.args[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, value_expr] : expr.kwargs) {
    KILN_ASSIGN_OR_RETURN(Value v, eval(*value_expr, scope));
    args.keyword.emplace_back(key, std::move(v));
  }
  return args;
}

Expected<Value> Interpreter::eval(const Expr& expr, Scope& scope) {
  auto result = eval_inner(expr, scope);
  if (!result.has_value()) return locate(result.status(), expr.line, expr.column);
  return result;
}

Expected<Value> Interpreter::eval_binary(const Expr& expr, Scope& scope) {
  KILN_ASSIGN_OR_RETURN(Value lhs, eval(*expr.args[0], scope));
  if (expr.name == "and") {
    if (!lhs.truthy()) return lhs;
    return eval(*expr.args[1], scope);
  }
  if (expr.name == "or") {
    if (lhs.truthy()) return lhs;
    return eval(*expr.args[1], scope);
  }
  KILN_ASSIGN_OR_RETURN(Value rhs, eval(*expr.args[1], scope));
  return binary_op(expr.name, lhs, rhs, *this);
}

Expected<Value> Interpreter::eval_compare(const Expr& expr, Scope& scope) {
  KILN_ASSIGN_OR_RETURN(Value lhs, eval(*expr.args[0], scope));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Value rhs, eval(*expr.args[i + 1], scope));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "==") {
      result = values_equal(lhs, rhs);
    } else if (op == "!=") {
      result = !values_equal(lhs, rhs);
    } else if (op == "in" || op == "notin") {
      KILN_ASSIGN_OR_RETURN(bool found, contains(rhs, lhs));
      result = op == "in" ? found : !found;
    } else {
      if (lhs.is_undefined()) return undefined_error(lhs);
      if (rhs.is_undefined()) return undefined_error(rhs);
      auto less = [](const Value& a, const Value& b) { return values_less(a, b); };
      if (op == "<") {
        KILN_ASSIGN_OR_RETURN(result, less(lhs, rhs));
      } else if (op == ">") {
        KILN_ASSIGN_OR_RETURN(result, less(rhs, lhs));
      } else if (op == "<=") {
        KILN_ASSIGN_OR_RETURN(bool greater, less(rhs, lhs));
        result = !greater;
      } else {
        KILN_ASSIGN_OR_RETURN(bool smaller, less(lhs, rhs));
        result = !smaller;
      }
    }
    if (!result) return Value(false);
    lhs = std::move(rhs);
  }
  return Value(true);
}

Expected<Value> Interpreter::eval_inner(const Expr& expr, Scope& scope) {
  KILN_RETURN_IF_ERROR(charge(1));
  switch (expr.kind) {
    case Expr::Kind::kLiteral: return expr.literal;
    case Expr::Kind::kName: {
      Value* v = scope.find(expr.name);
      if (v == nullptr) return Value::undefined("'" + expr.name + "' is undefined");
      return *v;
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& e : expr.args) {
        KILN_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), expr.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        KILN_ASSIGN_OR_RETURN(Value k, eval(*expr.args[i], scope));
        KILN_ASSIGN_OR_RETURN(Value v, eval(*expr.args[i + 1], scope));
        if (k.kind() == Kind::kList && !k.as_list().is_tuple) return invalid_argument("unhashable type: 'list'");
        if (k.kind() == Kind::kDict) return invalid_argument("unhashable type: 'dict'");
        bool replaced = false;
        for (auto& [ek, ev] : items) {
          if (values_equal(ek, k)) {
            ev = v;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(std::move(k), std::move(v));
      }
      return Value::dict(std::move(items));
    }
    case Expr::Kind::kGetAttr: {
      KILN_ASSIGN_OR_RETURN(Value obj, eval(*expr.args[0], scope));
      return get_attribute(obj, expr.name);
    }
    case Expr::Kind::kGetItem: {
      KILN_ASSIGN_OR_RETURN(Value obj, eval(*expr.args[0], scope));
      KILN_ASSIGN_OR_RETURN(Value key, eval(*expr.args[1], scope));
      return get_item(obj, key);
    }
    case Expr::Kind::kSlice: {
      KILN_ASSIGN_OR_RETURN(Value obj, eval(*expr.args[0], scope));
      Value parts[3] = {Value::none(), Value::none(), Value::none()};
      for (size_t i = 0; i < 3; ++i) {
        if (expr.args[i + 1]) {
          KILN_ASSIGN_OR_RETURN(parts[i], eval(*expr.args[i + 1], scope));
        }
      }
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall: {
      KILN_ASSIGN_OR_RETURN(Value callee, eval(*expr.args[0], scope));
      KILN_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, scope, 1));
      return call(callee, args);
    }
    case Expr::Kind::kFilter: {
      Value input;
      if (expr.args[0]) {
        KILN_ASSIGN_OR_RETURN(input, eval(*expr.args[0], scope));
      } else {
        Value* block = scope.find("\x01block");
        if (block != nullptr) input = *block;
      }
      KILN_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, scope, 1));
      return apply_filter(expr.name, input, args);
    }
    case Expr::Kind::kTest: {
      KILN_ASSIGN_OR_RETURN(Value input, eval(*expr.args[0], scope));
      KILN_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, scope, 1));
      KILN_ASSIGN_OR_RETURN(bool result, apply_test(expr.name, input, args));
      return Value(expr.negated ? !result : result);
    }
    case Expr::Kind::kUnary: {
      KILN_ASSIGN_OR_RETURN(Value operand, eval(*expr.args[0], scope));
      if (expr.name == "not") return Value(!operand.truthy());
      if (operand.is_undefined()) return undefined_error(operand);
      if (!operand.is_number()) {
        return invalid_argument("bad operand type for unary " + expr.name + ": '" + operand.type_name() + "'");
      }
      if (expr.name == "+") return operand.kind() == Kind::kBool ? Value(operand.as_int()) : operand;
      if (operand.kind() == Kind::kFloat) return Value(-operand.as_double());
      return checked_int(-static_cast<Int128>(operand.as_int()));
    }
    case Expr::Kind::kBinary: return eval_binary(expr, scope);
    case Expr::Kind::kCompare: return eval_compare(expr, scope);
    case Expr::Kind::kCondition: {
      KILN_ASSIGN_OR_RETURN(Value cond, eval(*expr.args[1], scope));
      if (cond.truthy()) return eval(*expr.args[0], scope);
      if (expr.args[2]) return eval(*expr.args[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return internal_error("unknown expression kind");
}

}  // namespace kiln::llm::jinja
