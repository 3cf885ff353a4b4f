#include "server/generation/kserve_protocol.h"

#include "server/request_fields.h"

namespace kiln::server {
namespace {

using nlohmann::json;

class KServeFormat : public ResponseFormat {
 public:
  void append_stream_chunk(const GenerationPlan& plan, const ChoiceState& c, const PromptState&, std::string_view text,
                           std::span<const llm::TokenInfo>, bool, std::string& out) override {
    json event = {{"model_name", plan.model}, {"model_version", "1"}, {"text_output", std::string(text)}};
    if (c.finish != llm::FinishReason::kNone) event["finish_reason"] = std::string(llm::finish_reason_name(c.finish));
    out += sse_event(dump_json(event));
  }
  std::string stream_end(const GenerationPlan&, const llm::RequestUsage&) override { return ""; }
  std::string stream_error(const ApiError& e) override { return sse_event(dump_json(json{{"error", e.message}})); }
  std::string complete(const GenerationPlan& plan, const std::vector<ChoiceState>& choices, const std::vector<PromptState>&,
                       const llm::RequestUsage& usage) override {
    const ChoiceState& c = choices.at(0);
    return dump_json({{"model_name", plan.model},
                      {"model_version", "1"},
                      {"text_output", c.text},
                      {"finish_reason", std::string(llm::finish_reason_name(c.finish))},
                      {"prompt_tokens", usage.prompt_tokens},
                      {"completion_tokens", usage.completion_tokens}});
  }
  HttpResponse error(const ApiError& e) override { return kserve_error_response(e); }
};

}  // namespace

ApiResult<GenerationPlan> parse_kserve_generate(const json& body, const ServedModel& m, const std::string& request_id,
                                                bool stream) {
  GenerationPlan plan;
  plan.api = Api::kKServe;
  plan.id = request_id;
  plan.model = m.name;
  plan.stream = stream;
  RequestFields top(body);
  auto text = top.string("text_input");
  if (!text && !top.error()) top.fail_field("text_input", "text_input is required (a string)");
  llm::SamplingParams params = m.defaults;
  std::optional<int64_t> max_tokens;
  bool add_special = true;
  // Triton passes sampling values either as inputs (top level) or as request parameters.
  auto read = [&](RequestFields& f) {
    read_sampling_fields(f, m.vocab_size, params);
    if (auto v = f.integer("max_tokens", 1, m.max_seq_len)) max_tokens = v;
    if (auto v = f.boolean("add_special_tokens")) add_special = *v;
    if (auto v = f.string_list("stop_words", 16)) params.stop = *v;
  };
  read(top);
  if (top.error()) return *top.error();
  if (const json* p = top.get("parameters")) {
    if (!p->is_object()) return ApiError::bad_field("parameters", "parameters must be an object");
    RequestFields pf(*p, "parameters.");
    read(pf);
    pf.reject_unread();
    if (pf.error()) return *pf.error();
  }
  top.reject_unread();
  if (top.error()) return *top.error();
  auto ids = m.tokenizer->encode(*text, add_special);
  if (!ids) return ApiError::bad_field("text_input", "text_input could not be tokenised: " + ids.status().message());
  const int64_t len = static_cast<int64_t>(ids->size());
  if (len == 0) return ApiError::bad_field("text_input", "text_input is empty (no tokens)");
  if (len >= m.max_seq_len) {
    return ApiError::bad_field("text_input", "text_input has " + std::to_string(len) + " tokens; the context window is " +
                                                 std::to_string(m.max_seq_len));
  }
  const int64_t want = max_tokens.value_or(std::min<int64_t>(16, m.max_seq_len - len));
  if (len + want > m.max_seq_len) {
    return ApiError::bad_field("max_tokens", "text_input has " + std::to_string(len) + " tokens and max_tokens asks for " +
                                                 std::to_string(want) + " more; the context window is " +
                                                 std::to_string(m.max_seq_len));
  }
  params.max_tokens = static_cast<int32_t>(want);
  if (Status s = llm::validate(params, m.vocab_size); !s) return ApiError::bad_request(s.message());
  llm::GenerationRequest r;
  r.request_id = request_id;
  r.prompt = std::move(*ids);
  r.params = params;
  plan.requests.push_back(std::move(r));
  plan.prompt_texts.push_back(*text);
  plan.log_prompt = *text;
  return plan;
}

std::string kserve_server_metadata() {
  return dump_json({{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", json::array({"generate"})}});
}

std::string kserve_model_metadata(const ServedModel& m) {
  return dump_json({{"name", m.name},
                    {"versions", json::array({"1"})},
                    {"platform", "kiln"},
                    {"inputs", json::array({{{"name", "text_input"}, {"datatype", "BYTES"}, {"shape", json::array({1})}}})},
                    {"outputs", json::array({{{"name", "text_output"}, {"datatype", "BYTES"}, {"shape", json::array({-1})}}})}});
}

std::unique_ptr<ResponseFormat> make_kserve_format(const ServedModel&) { return std::make_unique<KServeFormat>(); }

}  // namespace kiln::server
