// Jinja interpreter: renders a parsed template against a context, with jinja2's semantics as
// transformers configures it (ImmutableSandboxedEnvironment, loop controls, autoescape off).
//
// An Interpreter lives for one render: it owns the variable scopes and the output, reads the
// syntax tree without changing it, and enforces RenderLimits so that a hostile template or input
// (deep recursion, endless loops, exponential strings) ends in an error instead of exhausting
// the process.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "llm/jinja/jinja_ast.h"
#include "llm/jinja/jinja_value.h"

namespace kiln::llm::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // rendered text, and any single string built
  int max_call_depth = 64;                      // nested macro calls
  int64_t max_steps = 5'000'000;                // evaluated expressions + executed statements
};

class Interpreter {
 public:
  explicit Interpreter(RenderLimits limits) : limits_(limits) {}

  // Renders `body` with `context` as the template's variables (the globals — range, dict,
  // namespace, raise_exception, strftime_now — sit below them).
  Expected<std::string> render(const Body& body, std::vector<std::pair<std::string, Value>> context);

  // For builtins: calls a callable value, applies a filter or test by name.
  Expected<Value> call(const Value& callee, CallArgs& args);
  Expected<Value> apply_filter(const std::string& name, const Value& input, CallArgs& args);
  Expected<bool> apply_test(const std::string& name, const Value& input, CallArgs& args);
  // Fails when a string or list of `bytes` would exceed the output limit.
  Status check_size(size_t bytes) const;
  // Charges `steps` against the step budget.
  Status charge(int64_t steps);

 private:
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    Scope* parent = nullptr;
    Value* find(const std::string& name);
    void set(const std::string& name, Value value);
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Expected<Flow> exec_body(const Body& body, Scope& scope, std::string& out);
  Expected<Flow> exec(const Stmt& stmt, Scope& scope, std::string& out);
  Expected<Flow> exec_for(const Stmt& stmt, Scope& scope, std::string& out);
  Status exec_set(const Stmt& stmt, Scope& scope);
  Value make_macro(const Stmt& stmt, Scope* caller_scope, const Stmt* caller_body);
  Status assign(Scope& scope, const std::vector<std::string>& targets, const Value& value, const Stmt& at);
  Status append(std::string& out, std::string_view text) const;

  Expected<Value> eval(const Expr& expr, Scope& scope);
  Expected<Value> eval_inner(const Expr& expr, Scope& scope);
  Expected<CallArgs> eval_args(const Expr& expr, Scope& scope, size_t first);
  Expected<Value> eval_binary(const Expr& expr, Scope& scope);
  Expected<Value> eval_compare(const Expr& expr, Scope& scope);

  RenderLimits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  Scope* root_ = nullptr;
};

// Python operators on values, shared with builtins (sum, ...). Messages follow Python's.
Expected<Value> binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& interp);
Expected<bool> contains(const Value& container, const Value& needle);
// Raises jinja2's UndefinedError for `value` when it is undefined.
Status undefined_error(const Value& value);

}  // namespace kiln::llm::jinja
