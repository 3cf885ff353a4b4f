// Parsing and validation of the OpenAI-compatible requests (openai_protocol.h); the response
// side is in openai_responses.cpp.
#include <algorithm>
#include <chrono>
#include <random>

#include "server/generation/openai_protocol.h"
#include "llm/tools/tool_call_grammar.h"
#include "server/request_fields.h"

namespace kiln::server {
namespace {

using nlohmann::json;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_model(RequestFields& f, const ServedModel& m) {
  if (auto name = f.string("model"); name && *name != m.name) {
    // OpenAI answers an unknown model with 404.
    f.fail({404, "the model '" + *name + "' does not exist; this server serves '" + m.name + "'", "invalid_request_error",
            "model", "model_not_found"});
  }
}

// What to say of a field OpenAI's or vLLM's clients may send and this server does not support.
std::string unsupported_hint(std::string_view field) {
  if (field == "functions" || field == "function_call") return "use tools and tool_choice instead";
  if (field.starts_with("guided_")) {
    return "use structured_outputs (json, regex, choice or grammar) or response_format";
  }
  if (field == "prompt_logprobs") return "use echo with logprobs on /v1/completions";
  return {};
}

// A structured-output constraint as the request states it, before it is compiled.
struct ConstraintSpec {
  llm::structured::ConstraintKind kind;
  std::string source;
  std::string field;  // the request field, for errors
};

// The JSON text of the value at `path` in the raw body, members in their written order; the
// parsed value's text when the raw body is not given.
std::string ordered_json_text(std::string_view raw_body, std::initializer_list<const char*> path, const json& parsed) {
  if (!raw_body.empty()) {
    auto ordered = nlohmann::ordered_json::parse(raw_body, nullptr, false);
    const nlohmann::ordered_json* at = &ordered;
    for (const char* key : path) {
      if (!at->is_object() || !at->contains(key)) {
        at = nullptr;
        break;
      }
      at = &(*at)[key];
    }
    if (at) return at->dump();
  }
  return parsed.dump();
}

// response_format: text, json_object (any JSON object) or json_schema {name, schema, strict,
// description}.
std::optional<ConstraintSpec> read_response_format(RequestFields& f, std::string_view raw_body) {
  const json* rf = f.get("response_format");
  if (!rf || f.error()) return std::nullopt;
  auto type = rf->is_object() ? rf->find("type") : rf->end();
  if (!rf->is_object() || type == rf->end() || !type->is_string()) {
    f.fail_field("response_format", "response_format must be an object with a type (text, json_object or json_schema)");
    return std::nullopt;
  }
  const std::string t = type->get<std::string>();
  if (t != "text" && t != "json_object" && t != "json_schema") {
    f.fail_field("response_format", "response_format.type must be one of text, json_object, json_schema; got '" + t + "'");
    return std::nullopt;
  }
  RequestFields rff(*rf, "response_format.");
  (void)rff.string("type");
  std::optional<ConstraintSpec> spec;
  if (t == "json_object") spec = ConstraintSpec{llm::structured::ConstraintKind::kJsonObject, "", "response_format"};
  if (t == "json_schema") {
    const json* js = rff.get("json_schema");
    if (!js || !js->is_object()) {
      rff.fail_field("json_schema", "response_format.json_schema must be an object with a name and a schema");
    } else {
      RequestFields jf(*js, "response_format.json_schema.");
      (void)jf.string("name");
      (void)jf.string("description");
      (void)jf.boolean("strict");  // the schema is always enforced, strict or not
      const json* schema = jf.get("schema");
      if (!schema && !jf.error()) jf.fail_field("schema", "response_format.json_schema.schema is required");
      jf.reject_unread();
      if (jf.error()) rff.fail(*jf.error());
      if (schema && !jf.error()) {
        spec = ConstraintSpec{llm::structured::ConstraintKind::kJsonSchema,
                              ordered_json_text(raw_body, {"response_format", "json_schema", "schema"}, *schema),
                              "response_format.json_schema.schema"};
      }
    }
  }
  rff.reject_unread();
  if (rff.error()) {
    f.fail(*rff.error());
    return std::nullopt;
  }
  return spec;
}

// vLLM's structured_outputs: exactly one of json (a schema, or its JSON text), regex, choice
// (a list of strings) or grammar (docs/structured-outputs.md).
std::optional<ConstraintSpec> read_structured_outputs(RequestFields& f, std::string_view raw_body) {
  const json* so = f.get("structured_outputs");
  if (!so || f.error()) return std::nullopt;
  if (!so->is_object()) {
    f.fail_field("structured_outputs", "structured_outputs must be an object with one of json, regex, choice, grammar");
    return std::nullopt;
  }
  RequestFields sf(*so, "structured_outputs.");
  std::vector<ConstraintSpec> specs;
  if (const json* j = sf.get("json")) {
    if (j->is_string()) {
      specs.push_back({llm::structured::ConstraintKind::kJsonSchema, j->get<std::string>(), "structured_outputs.json"});
    } else if (j->is_object()) {
      specs.push_back({llm::structured::ConstraintKind::kJsonSchema,
                       ordered_json_text(raw_body, {"structured_outputs", "json"}, *j), "structured_outputs.json"});
    } else {
      sf.fail_field("json", "structured_outputs.json must be a JSON schema (an object, or its JSON text)");
    }
  }
  if (auto r = sf.string("regex")) specs.push_back({llm::structured::ConstraintKind::kRegex, *r, "structured_outputs.regex"});
  if (const json* c = sf.get("choice")) {
    specs.push_back({llm::structured::ConstraintKind::kChoice, c->dump(), "structured_outputs.choice"});
  }
  if (auto g = sf.string("grammar")) specs.push_back({llm::structured::ConstraintKind::kGrammar, *g, "structured_outputs.grammar"});
  sf.reject_unread();
  if (!sf.error() && specs.size() != 1) {
    sf.fail(ApiError::bad_field("structured_outputs", "structured_outputs must hold exactly one of json, regex, choice, "
                                                      "grammar; it holds " + std::to_string(specs.size())));
  }
  if (sf.error()) {
    f.fail(*sf.error());
    return std::nullopt;
  }
  return specs[0];
}

// Both constraint fields, at most one of them constraining; the compiled grammar (from the
// model's cache) or nothing.
std::shared_ptr<const llm::structured::CompiledGrammar> read_constraint(RequestFields& f, const ServedModel& m,
                                                                        std::string_view raw_body) {
  auto format = read_response_format(f, raw_body);
  auto outputs = read_structured_outputs(f, raw_body);
  if (f.error()) return nullptr;
  if (format && outputs) {
    f.fail_field("structured_outputs", "give structured_outputs or a json response_format, not both");
    return nullptr;
  }
  const std::optional<ConstraintSpec>& spec = format ? format : outputs;
  if (!spec) return nullptr;
  if (!m.grammars) {
    f.fail_field(spec->field.substr(0, spec->field.find('.')).c_str(), "structured outputs are not available for this model");
    return nullptr;
  }
  auto compiled = m.grammars->get(spec->kind, spec->source, spec->field);
  if (!compiled) {
    const std::string param = spec->field.substr(0, spec->field.find('.'));
    f.fail(ApiError::bad_field(param, compiled.status().message()));
    return nullptr;
  }
  return std::move(*compiled);
}

// The end user's id, for the access log.
void read_user(RequestFields& f, GenerationPlan& plan) {
  if (auto u = f.string("user")) plan.user = *u;
}

struct Prompt {
  std::string text;
  std::vector<int32_t> tokens;
};

// prompt: a string, a list of strings, a list of token ids, or a list of token-id lists.
ApiResult<std::vector<Prompt>> read_prompts(const json& p, const ServedModel& m, bool add_special) {
  auto bad = [](std::string msg) { return ApiError::bad_field("prompt", std::move(msg)); };
  std::vector<Prompt> out;
  auto from_text = [&](const std::string& text) -> std::optional<ApiError> {
    auto ids = m.tokenizer->encode(text, add_special);
    if (!ids) return bad("the prompt could not be tokenised: " + ids.status().message());
    out.push_back({text, std::move(*ids)});
    return std::nullopt;
  };
  auto from_ids = [&](const json& list) -> std::optional<ApiError> {
    Prompt pr;
    for (const auto& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m.vocab_size) {
        return bad("prompt token ids must be integers in [0, " + std::to_string(m.vocab_size) + ")");
      }
      pr.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    auto text = m.tokenizer->decode(pr.tokens, false);
    if (!text) return bad("the prompt's token ids could not be decoded: " + text.status().message());
    pr.text = std::move(*text);
    out.push_back(std::move(pr));
    return std::nullopt;
  };
  if (p.is_string()) {
    if (auto e = from_text(p.get<std::string>())) return *e;
    return out;
  }
  if (!p.is_array()) return bad("prompt must be a string, a list of strings, a list of token ids or a list of such lists");
  if (p.empty()) return bad("prompt must not be an empty list");
  if (p.size() > kMaxPrompts && !p[0].is_number()) {
    return bad("prompt holds " + std::to_string(p.size()) + " prompts; at most " + std::to_string(kMaxPrompts) + " are allowed");
  }
  if (p[0].is_number()) {
    if (auto e = from_ids(p)) return *e;
    return out;
  }
  for (const auto& item : p) {
    if (item.is_string()) {
      if (auto e = from_text(item.get<std::string>())) return *e;
    } else if (item.is_array() && !item.empty()) {
      if (auto e = from_ids(item)) return *e;
    } else {
      return bad("each prompt in the list must be a string or a non-empty list of token ids");
    }
  }
  return out;
}

// Common tail of both endpoints: length checks, n, logprobs, and one engine request per prompt.
ApiResult<GenerationPlan> finish_plan(GenerationPlan plan, std::vector<Prompt> prompts, llm::SamplingParams params,
                                      std::optional<int64_t> max_tokens, const char* max_tokens_field,
                                      const char* prompt_field, int64_t default_max_tokens, int32_t prompt_logprobs,
                                      bool skip_special, const ServedModel& m, const std::string& request_id) {
  if (static_cast<int64_t>(prompts.size()) * plan.n > kMaxChoices) {
    return ApiError::bad_field("n", "prompts x n is " + std::to_string(prompts.size() * static_cast<size_t>(plan.n)) +
                                        "; at most " + std::to_string(kMaxChoices) + " choices per request are allowed");
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].tokens.size());
    if (len == 0) return ApiError::bad_field(prompt_field, "the prompt is empty (no tokens)");
    if (len >= m.max_seq_len) {
      return ApiError::bad_field(prompt_field, "the prompt has " + std::to_string(len) +
                                                   " tokens; this model's context window is " +
                                                   std::to_string(m.max_seq_len) + " tokens, with room for at least one more");
    }
    int64_t want = 0;
    if (max_tokens) {
      want = *max_tokens;
      if (want == 0) {
        // Scoring the prompt only (echo with logprobs): one token is run and not shown.
        if (!plan.echo) return ApiError::bad_field(max_tokens_field, std::string(max_tokens_field) + " must be at least 1");
        plan.discard_generated = true;
        want = 1;
      }
      if (len + want > m.max_seq_len) {
        return ApiError::bad_field(max_tokens_field,
                                   "this model's context window is " + std::to_string(m.max_seq_len) + " tokens; the prompt has " +
                                       std::to_string(len) + " and " + max_tokens_field + " asks for " +
                                       std::to_string(want) + " more");
      }
    } else {
      want = std::min(default_max_tokens, m.max_seq_len - len);
    }
    llm::GenerationRequest r;
    r.request_id = prompts.size() == 1 ? request_id : request_id + "-" + std::to_string(i);
    r.prompt = std::move(prompts[i].tokens);
    r.params = params;
    r.params.max_tokens = static_cast<int32_t>(want);
    r.n = plan.n;
    r.prompt_logprobs = prompt_logprobs;
    r.skip_special_tokens = skip_special;
    if (Status s = llm::validate(r.params, m.vocab_size); !s) return ApiError::bad_request(s.message());
    plan.requests.push_back(std::move(r));
    plan.prompt_texts.push_back(std::move(prompts[i].text));
  }
  return plan;
}

// Every engine request of the plan follows `grammar` (when there is one).
ApiResult<GenerationPlan> with_grammar(ApiResult<GenerationPlan> plan,
                                       const std::shared_ptr<const llm::structured::CompiledGrammar>& grammar) {
  if (auto* p = std::get_if<GenerationPlan>(&plan)) {
    for (llm::GenerationRequest& r : p->requests) r.grammar = grammar;
  }
  return plan;
}

void read_stream_fields(RequestFields& f, GenerationPlan& plan) {
  if (auto v = f.boolean("stream")) plan.stream = *v;
  if (const json* so = f.get("stream_options"); so && !f.error()) {
    if (!so->is_object()) {
      f.fail_field("stream_options", "stream_options must be an object");
      return;
    }
    RequestFields sf(*so, "stream_options.");
    if (auto v = sf.boolean("include_usage")) plan.include_usage = *v;
    if (sf.error()) f.fail(*sf.error());
  }
}

// What tools, tool_choice and parallel_tool_calls ask: the tools the template shows (null: none),
// how the choices' text is parsed for calls, and, when a call is forced, its grammar.
struct ToolRequest {
  nlohmann::ordered_json template_tools;
  std::optional<ToolCalling> calling;
  std::shared_ptr<const llm::structured::CompiledGrammar> grammar;
};

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// The functions of a non-empty `tools` list, each checked field by field (an unknown member is a
// 400 naming it); their parameters schemas come from `ordered`, the same list with properties in
// written order, the order a forced call writes them in. Nothing when a tool is refused (`f` says why).
std::optional<std::vector<llm::tools::ToolFunction>> read_tool_functions(RequestFields& f, const json& tools,
                                                                         const nlohmann::ordered_json& ordered) {
  std::vector<llm::tools::ToolFunction> functions;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& tool = tools[i];
    if (!tool.is_object()) {
      f.fail_field(at.c_str(), at + " must be an object {\"type\": \"function\", \"function\": {...}}");
      return std::nullopt;
    }
    RequestFields tf(tool, at + ".");
    auto type = tf.string("type");
    if (!tf.error() && type != "function") {
      tf.fail_field("type", at + ".type must be \"function\"" + (type ? ", not '" + *type + "'" : std::string()));
    }
    const json* fn = tf.get("function");
    if (!tf.error() && (!fn || !fn->is_object())) tf.fail_field("function", at + ".function must be an object with a name");
    tf.reject_unread();
    if (tf.error()) {
      f.fail(*tf.error());
      return std::nullopt;
    }
    RequestFields ff(*fn, at + ".function.");
    auto name = ff.string("name");
    (void)ff.string("description");
    (void)ff.boolean("strict");  // a forced call always follows the schema, strict or not
    const json* params = ff.get("parameters");
    if (!ff.error() && (!name || !valid_function_name(*name))) {
      ff.fail_field("name", at + ".function.name must be 1 to 64 letters, digits, '_' or '-'");
    }
    if (!ff.error() && params && !params->is_object()) ff.fail_field("parameters", at + ".function.parameters must be a JSON schema object");
    ff.reject_unread();
    if (ff.error()) {
      f.fail(*ff.error());
      return std::nullopt;
    }
    for (const auto& other : functions) {
      if (other.name == *name) {
        f.fail_field("tools", "tools names the function '" + *name + "' twice");
        return std::nullopt;
      }
    }
    functions.push_back({*name, params ? ordered[i]["function"]["parameters"].dump() : std::string(),
                         at + ".function.parameters"});
  }
  return functions;
}

constexpr const char* kToolChoiceValues =
    "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}";

// `generating`: for a generation (a forced call's grammar is compiled), not only a rendering.
ToolRequest read_tools(RequestFields& f, const ServedModel& m, std::string_view raw_body, bool generating) {
  ToolRequest out;
  const json* tools = f.get("tools");
  const json* choice = f.get("tool_choice");
  const std::optional<bool> parallel = f.boolean("parallel_tool_calls");
  if (f.error()) return out;
  if (!tools) {
    // As OpenAI answers: both only go with tools.
    if (choice) f.fail_field("tool_choice", "tool_choice is only allowed when tools are given");
    if (parallel) f.fail_field("parallel_tool_calls", "parallel_tool_calls is only allowed when tools are given");
    return out;
  }
  if (!tools->is_array() || tools->empty()) {
    f.fail_field("tools", "tools must be a non-empty list of {\"type\": \"function\", \"function\": {\"name\": ...}}");
    return out;
  }
  if (tools->size() > kMaxTools) {
    f.fail_field("tools", "tools holds " + std::to_string(tools->size()) + " tools; at most " + std::to_string(kMaxTools) +
                              " are allowed");
    return out;
  }
  auto ordered = nlohmann::ordered_json::parse(ordered_json_text(raw_body, {"tools"}, *tools));
  auto read = read_tool_functions(f, *tools, ordered);
  if (!read) return out;
  const std::vector<llm::tools::ToolFunction>& functions = *read;
  bool forced = false;
  std::optional<std::string> named;
  if (choice) {
    if (choice->is_string() && *choice == "none") return out;  // the model is not shown the tools; nothing is parsed
    if (choice->is_string() && *choice == "required") {
      forced = true;
    } else if (choice->is_object()) {
      RequestFields cf(*choice, "tool_choice.");
      auto type = cf.string("type");
      const json* fn = cf.get("function");
      cf.reject_unread();
      if (!cf.error() && (type != "function" || !fn || !fn->is_object() || !fn->contains("name") ||
                          !(*fn)["name"].is_string() || fn->size() != 1)) {
        cf.fail_field("", kToolChoiceValues);
      }
      if (cf.error()) {
        f.fail(ApiError::bad_field("tool_choice", cf.error()->message));
        return out;
      }
      named = (*fn)["name"].get<std::string>();
      if (std::none_of(functions.begin(), functions.end(), [&](const auto& fun) { return fun.name == *named; })) {
        f.fail_field("tool_choice", "tool_choice names the function '" + *named + "', which is not in tools");
        return out;
      }
      forced = true;
    } else if (!(choice->is_string() && *choice == "auto")) {
      f.fail_field("tool_choice", kToolChoiceValues);
      return out;
    }
  }
  if (!m.tool_syntax) {
    f.fail_field("tools", "the model '" + m.name + "' has a chat template that teaches no tool-call format Kiln reads; "
                          "start kiln serve with --tool-call-parser (" + std::string(llm::tools::kToolCallSyntaxNames) +
                          "), or send tool_choice none");
    return out;
  }
  out.template_tools = std::move(ordered);
  out.calling = ToolCalling{*m.tool_syntax, forced, parallel.value_or(true)};
  if (!forced || !generating) return out;
  std::vector<llm::tools::ToolFunction> callable;
  for (const auto& fun : functions) {
    if (!named || fun.name == *named) callable.push_back(fun);
  }
  const bool many = !named && out.calling->parallel;
  std::string key = "tools:" + std::string(llm::tools::tool_call_syntax_name(*m.tool_syntax)) + (many ? ":n" : ":1");
  for (const auto& fun : callable) key += "\n" + fun.name + "\n" + fun.parameters_json;
  auto compiled = m.grammars->get(key, [&] { return llm::tools::tool_call_grammar(*m.tool_syntax, callable, many); });
  if (!compiled) {
    f.fail(ApiError::bad_field("tools", compiled.status().message()));
    return out;
  }
  out.grammar = std::move(*compiled);
  return out;
}

// messages -> prompt text through the chat template; `template_tools` (null: none) the tools it shows.
ApiResult<std::string> render_chat(const ServedModel& m, RequestFields& f, const nlohmann::ordered_json& template_tools) {
  const json* msgs = f.get("messages");
  if (!msgs) return ApiError::bad_field("messages", "messages is required");
  if (!msgs->is_array()) return ApiError::bad_field("messages", "messages must be a list of message objects");
  if (msgs->empty()) return ApiError::bad_field("messages", "messages must not be empty");
  if (msgs->size() > kMaxMessages) {
    return ApiError::bad_field("messages", "messages holds more than " + std::to_string(kMaxMessages) + " messages");
  }
  std::vector<llm::ChatMessage> messages;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& msg = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return ApiError::bad_field(at, at + " must be an object with a role and content");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return ApiError::bad_field(at + ".role", at + ".role must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return ApiError::bad_field(at + ".role", at + ".role must be one of system, developer, user, assistant, tool; got '" + r + "'");
    }
    llm::ChatMessage cm;
    cm.role = r;
    cm.extra = nlohmann::ordered_json::object();
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      if (r != "assistant") return ApiError::bad_field(at + ".content", at + ".content is required for role " + r);
      cm.extra["content"] = nullptr;
    } else if (content->is_string()) {
      cm.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const json& part = (*content)[j];
        const std::string pat = at + ".content[" + std::to_string(j) + "]";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
          return ApiError::bad_field(pat, pat + " must be an object with a type");
        }
        if (part["type"] != "text") {
          return ApiError::bad_field(pat + ".type", pat + ".type '" + part["type"].get<std::string>() +
                                                         "' is not supported: this model reads text only");
        }
        if (!part.contains("text") || !part["text"].is_string()) {
          return ApiError::bad_field(pat + ".text", pat + ".text must be a string");
        }
        if (j) cm.content += "\n";
        cm.content += part["text"].get<std::string>();
      }
    } else {
      return ApiError::bad_field(at + ".content", at + ".content must be a string or a list of content parts");
    }
    for (const auto& [k, v] : msg.items()) {
      if (k != "role" && k != "content") cm.extra[k] = nlohmann::ordered_json::parse(v.dump());
    }
    messages.push_back(std::move(cm));
  }
  if (!m.chat_template) {
    return ApiError::bad_field("messages", "the model '" + m.name +
                                               "' has no chat template; start the server with --chat-template FILE, or use /v1/completions");
  }
  llm::ChatTemplateOptions options;
  if (auto v = f.boolean("add_generation_prompt")) options.add_generation_prompt = *v;
  options.tools = template_tools;
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object()) return ApiError::bad_field("chat_template_kwargs", "chat_template_kwargs must be an object");
    options.extra_context = nlohmann::ordered_json::parse(kw->dump());
  }
  if (f.error()) return *f.error();
  auto text = m.chat_template->render(messages, options);
  if (!text) return ApiError::bad_field("messages", "the chat template could not render these messages: " + text.status().message());
  return std::move(*text);
}

}  // namespace

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

ApiResult<GenerationPlan> parse_completion_request(const json& body, const ServedModel& m, const std::string& request_id,
                                                   std::string_view raw_body) {
  RequestFields f(body);
  GenerationPlan plan;
  plan.api = Api::kCompletions;
  plan.id = random_id("cmpl-");
  plan.created = unix_now();
  plan.model = m.name;
  check_model(f, m);
  const json* prompt = f.get("prompt");
  if (!prompt && !f.error()) f.fail_field("prompt", "prompt is required");
  if (auto v = f.integer("n", 1, kMaxChoices)) plan.n = static_cast<int32_t>(*v);
  if (auto v = f.integer("best_of", 1, kMaxChoices); v && *v != plan.n) {
    f.fail_field("best_of", "best_of must equal n: choosing the best of several samples is not supported");
  }
  if (auto v = f.string("suffix"); v && !v->empty()) f.fail_field("suffix", "suffix is not supported by this model");
  auto max_tokens = f.integer("max_tokens", 0, m.max_seq_len);
  if (auto v = f.boolean("echo")) plan.echo = *v;
  if (auto v = f.integer("logprobs", 0, llm::kMaxLogprobs)) plan.logprobs = static_cast<int32_t>(*v);
  read_stream_fields(f, plan);
  bool add_special = true, skip_special = true;
  if (auto v = f.boolean("add_special_tokens")) add_special = *v;
  if (auto v = f.boolean("skip_special_tokens")) skip_special = *v;
  llm::SamplingParams params = m.defaults;
  read_sampling_fields(f, m.vocab_size, params);
  auto grammar = read_constraint(f, m, raw_body);
  read_user(f, plan);
  f.reject_unread(unsupported_hint);
  if (f.error()) return *f.error();
  auto prompts = read_prompts(*prompt, m, add_special);
  if (auto* e = std::get_if<ApiError>(&prompts)) return *e;
  auto& list = std::get<std::vector<Prompt>>(prompts);
  for (size_t i = 0; i < list.size(); ++i) plan.log_prompt += (i ? "\n" : "") + list[i].text;
  params.logprobs = plan.logprobs;
  const int32_t prompt_logprobs = plan.echo && plan.logprobs >= 0 ? plan.logprobs : -1;
  return with_grammar(finish_plan(std::move(plan), std::move(list), params, max_tokens, "max_tokens", "prompt", 16,
                                 prompt_logprobs, skip_special, m, request_id),
                     grammar);
}

ApiResult<GenerationPlan> parse_chat_request(const json& body, const ServedModel& m, const std::string& request_id,
                                             std::string_view raw_body) {
  RequestFields f(body);
  GenerationPlan plan;
  plan.api = Api::kChat;
  plan.id = random_id("chatcmpl-");
  plan.created = unix_now();
  plan.model = m.name;
  check_model(f, m);
  if (auto v = f.integer("n", 1, kMaxChoices)) plan.n = static_cast<int32_t>(*v);
  // max_tokens is the older name; when both are given, max_completion_tokens wins (both checked).
  auto max_tokens = f.integer("max_completion_tokens", 1, m.max_seq_len);
  const auto legacy_max_tokens = f.integer("max_tokens", 1, m.max_seq_len);
  const char* max_field = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = legacy_max_tokens;
    max_field = "max_tokens";
  }
  bool logprobs = false;
  if (auto v = f.boolean("logprobs")) logprobs = *v;
  auto top = f.integer("top_logprobs", 0, llm::kMaxLogprobs);
  if (top && !logprobs) f.fail_field("top_logprobs", "top_logprobs needs logprobs set to true");
  plan.logprobs = logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
  read_stream_fields(f, plan);
  bool skip_special = true, add_special = false;
  if (auto v = f.boolean("skip_special_tokens")) skip_special = *v;
  if (auto v = f.boolean("add_special_tokens")) add_special = *v;
  llm::SamplingParams params = m.defaults;
  read_sampling_fields(f, m.vocab_size, params);
  auto grammar = read_constraint(f, m, raw_body);
  read_user(f, plan);
  ToolRequest tools = read_tools(f, m, raw_body, true);
  if (f.error()) return *f.error();
  if (tools.grammar && grammar) {
    return ApiError::bad_field("tool_choice", "a forced tool call (tool_choice required or a function) writes JSON of its own; "
                                              "do not give response_format json_schema or structured_outputs with it");
  }
  if (tools.grammar) grammar = tools.grammar;
  plan.tool_calling = tools.calling;
  // Mistral's [TOOL_CALLS] is a special token: its text must stay for the calls to be found.
  if (plan.tool_calling && plan.tool_calling->syntax == llm::tools::ToolCallSyntax::kMistral &&
      !body.contains("skip_special_tokens")) {
    skip_special = false;
  }
  auto text = render_chat(m, f, tools.template_tools);
  if (auto* e = std::get_if<ApiError>(&text)) return *e;
  f.reject_unread(unsupported_hint);
  if (f.error()) return *f.error();
  // The template writes BOS itself when the model wants one.
  auto ids = m.tokenizer->encode(std::get<std::string>(text), add_special);
  if (!ids) return ApiError::bad_field("messages", "the rendered conversation could not be tokenised: " + ids.status().message());
  plan.log_prompt = std::get<std::string>(text);
  std::vector<Prompt> prompts;
  prompts.push_back({std::get<std::string>(text), std::move(*ids)});
  params.logprobs = plan.logprobs;
  const int64_t len = static_cast<int64_t>(prompts[0].tokens.size());
  return with_grammar(finish_plan(std::move(plan), std::move(prompts), params, max_tokens, max_field, "messages",
                                 std::max<int64_t>(1, m.max_seq_len - len), -1, skip_special, m, request_id),
                     grammar);
}

ApiResult<std::string> tokenize_response(const json& body, const ServedModel& m) {
  RequestFields f(body);
  check_model(f, m);
  bool return_strs = false;
  if (auto v = f.boolean("return_token_strs")) return_strs = *v;
  std::vector<int32_t> ids;
  if (f.get("messages")) {
    bool add_special = false;
    if (auto v = f.boolean("add_special_tokens")) add_special = *v;
    ToolRequest tools = read_tools(f, m, {}, false);
    if (f.error()) return *f.error();
    auto text = render_chat(m, f, tools.template_tools);
    if (auto* e = std::get_if<ApiError>(&text)) return *e;
    auto r = m.tokenizer->encode(std::get<std::string>(text), add_special);
    if (!r) return ApiError::bad_field("messages", r.status().message());
    ids = std::move(*r);
  } else {
    auto prompt = f.string("prompt");
    bool add_special = true;
    if (auto v = f.boolean("add_special_tokens")) add_special = *v;
    if (f.error()) return *f.error();
    if (!prompt) return ApiError::bad_field("prompt", "give prompt (a string) or messages");
    auto r = m.tokenizer->encode(*prompt, add_special);
    if (!r) return ApiError::bad_field("prompt", r.status().message());
    ids = std::move(*r);
  }
  f.reject_unread(unsupported_hint);
  if (f.error()) return *f.error();
  json out = {{"count", ids.size()}, {"max_model_len", m.max_seq_len}, {"tokens", ids}, {"token_strs", nullptr}};
  if (return_strs) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(m.tokenizer->id_to_token(id).value_or(""));
    out["token_strs"] = std::move(strs);
  }
  return dump_json(out);
}

ApiResult<std::string> detokenize_response(const json& body, const ServedModel& m) {
  RequestFields f(body);
  check_model(f, m);
  if (!f.get("tokens") && !f.error()) f.fail_field("tokens", "tokens is required");
  auto ids = f.token_ids("tokens", m.vocab_size, static_cast<size_t>(m.max_seq_len) * 4);
  f.reject_unread(unsupported_hint);
  if (f.error()) return *f.error();
  auto text = m.tokenizer->decode(*ids, false);
  if (!text) return ApiError::bad_field("tokens", text.status().message());
  return dump_json(json{{"prompt", *text}});
}

}  // namespace kiln::server
