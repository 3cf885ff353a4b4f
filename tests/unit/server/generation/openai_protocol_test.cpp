#include "server/generation/openai_protocol.h"

#include <gtest/gtest.h>

#include "llm/structured/grammar_matcher.h"
#include "server/generation/kserve_protocol.h"
#include "server/request_fields.h"
#include "support/demo_served_model.h"

namespace kiln::server {
namespace {

using nlohmann::json;

using kiln::testing::read_source_file;

const ServedModel& demo() {
  static ServedModel* m = [] {
    auto r = kiln::testing::demo_served_model();
    EXPECT_TRUE(r.has_value()) << r.status().message();
    return new ServedModel(std::move(*r));
  }();
  return *m;
}

GenerationPlan completion(const std::string& body) {
  auto r = parse_completion_request(json::parse(body), demo(), "req");
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::get<GenerationPlan>(std::move(r));
}

ApiError completion_error(const std::string& body) {
  auto r = parse_completion_request(json::parse(body), demo(), "req");
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted: " << body;
    return {};
  }
  return std::get<ApiError>(r);
}

ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(json::parse(body), demo(), "req");
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted: " << body;
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiCompletions, StringPromptGetsBosAndModelDefaults) {
  GenerationPlan p = completion(R"({"model": "demo", "prompt": "It is a truth"})");
  ASSERT_EQ(p.requests.size(), 1u);
  const auto& r = p.requests[0];
  ASSERT_FALSE(r.prompt.empty());
  EXPECT_EQ(r.prompt[0], 0);  // <s>
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.8f);  // generation_config.json
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.prompt_logprobs, -1);
  EXPECT_FALSE(p.stream);
  EXPECT_EQ(p.prompt_texts[0], "It is a truth");
  EXPECT_EQ(p.id.rfind("cmpl-", 0), 0u);
}

TEST(OpenAiCompletions, RequestValuesOverrideDefaults) {
  GenerationPlan p = completion(R"({"prompt": "x", "max_tokens": 5, "temperature": 0, "top_k": -1, "top_p": 0.5,
      "min_p": 0.1, "seed": 7, "stop": "\n", "n": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.1, "logit_bias": {"42": -100}, "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}, "logprobs": 2, "echo": true})");
  const auto& r = p.requests[0];
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.temperature, 0.0f);
  EXPECT_EQ(r.params.top_k, 0);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.5f);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.seed, 7u);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.n, 3);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.params.logit_bias.at(42), -100.0f);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.prompt_logprobs, 2);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.echo);
}

TEST(OpenAiCompletions, PromptShapes) {
  EXPECT_EQ(completion(R"({"prompt": ["a", "b c"]})").requests.size(), 2u);
  GenerationPlan ids = completion(R"({"prompt": [0, 100, 200]})");
  ASSERT_EQ(ids.requests.size(), 1u);
  EXPECT_EQ(ids.requests[0].prompt, (std::vector<int32_t>{0, 100, 200}));
  GenerationPlan lists = completion(R"({"prompt": [[0, 5], [0, 6, 7]]})");
  ASSERT_EQ(lists.requests.size(), 2u);
  EXPECT_EQ(lists.requests[1].prompt, (std::vector<int32_t>{0, 6, 7}));
  EXPECT_NE(lists.requests[0].request_id, lists.requests[1].request_id);
}

TEST(OpenAiCompletions, EchoWithZeroMaxTokensScoresThePromptOnly) {
  GenerationPlan p = completion(R"({"prompt": "It is a truth", "max_tokens": 0, "echo": true, "logprobs": 1})");
  EXPECT_TRUE(p.discard_generated);
  EXPECT_EQ(p.requests[0].params.max_tokens, 1);
  EXPECT_EQ(p.requests[0].prompt_logprobs, 1);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
}

TEST(OpenAiCompletions, DefaultMaxTokensShrinksToTheContextLeft) {
  std::vector<int> ids(510, 5);
  json body = {{"prompt", ids}};
  auto r = parse_completion_request(body, demo(), "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r));
  EXPECT_EQ(std::get<GenerationPlan>(r).requests[0].params.max_tokens, 2);
}

struct BadCase {
  const char* body;
  const char* param;  // "" = no param
  int status = 400;
};

TEST(OpenAiCompletions, MalformedBodiesAre400NamingTheField) {
  const BadCase cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [true]})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": [1, -1]})", "prompt"},
      {R"({"prompt": [1, 8192]})", "prompt"},
      {R"({"prompt": "x", "model": "gpt-4"})", "model", 404},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 100000})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "16"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": 3})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 1000})", "n"},
      {R"({"prompt": ["a", "b", "c"], "n": 8})", "n"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"99999": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": "x", "seed": "s"})", "seed"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
      {R"({"prompt": "x", "stop_token_ids": [9999999]})", "stop_token_ids"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": "x", "response_format": {"type": "json_object", "extra": 1}})", "response_format.extra"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "number",
          "multipleOf": 2}}}})", "response_format"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})", "structured_outputs"},
      {R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= \"a"}})", "structured_outputs"},
      {R"({"prompt": "x", "structured_outputs": {"whitespace_pattern": " "}})", "structured_outputs.whitespace_pattern"},
      {R"({"prompt": "x", "structured_outputs": {"choice": []}})", "structured_outputs"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}})",
       "structured_outputs"},
      {R"({"prompt": "x", "response_format": {"type": "yaml"}})", "response_format"},
      {R"({"prompt": "x", "response_format": "json"})", "response_format"},
      {R"({"prompt": "x", "guided_json": {}})", "guided_json"},
      {R"({"prompt": "x", "no_such_field": 1})", "no_such_field"},
      {R"({"prompt": "x", "user": 5})", "user"},
  };
  for (const auto& c : cases) {
    ApiError e = completion_error(c.body);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAiCompletions, TooLongPromptNamesPromptAndTooManyTokensNamesMaxTokens) {
  std::vector<int> ids(512, 5);
  auto r = parse_completion_request(json{{"prompt", ids}}, demo(), "req");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).param, "prompt");
  std::vector<int> shorter(500, 5);
  auto r2 = parse_completion_request(json{{"prompt", shorter}, {"max_tokens", 20}}, demo(), "req");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r2));
  EXPECT_EQ(std::get<ApiError>(r2).param, "max_tokens");
  EXPECT_NE(std::get<ApiError>(r2).message.find("512"), std::string::npos);
}

TEST(OpenAiChat, MessagesGoThroughTheDemoTemplate) {
  auto r = parse_chat_request(json::parse(R"({"model": "demo", "messages": [
      {"role": "system", "content": "A quiet morning."},
      {"role": "user", "content": [{"type": "text", "text": "Who is there?"}]}], "max_tokens": 8})"),
                              demo(), "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  const GenerationPlan& p = std::get<GenerationPlan>(r);
  EXPECT_EQ(p.prompt_texts[0], "<s>A quiet morning.\n\n\"Who is there?\" said the visitor.\n\n\"");
  EXPECT_EQ(p.requests[0].prompt[0], 0);
  EXPECT_NE(p.requests[0].prompt[1], 0);  // the template's BOS only, none added by the tokenizer
  EXPECT_EQ(p.requests[0].params.max_tokens, 8);
  EXPECT_EQ(p.id.rfind("chatcmpl-", 0), 0u);
}

TEST(OpenAiChat, DefaultMaxTokensIsTheRestOfTheContextAndMaxCompletionTokensWins) {
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})"), demo(), "req");
  const GenerationPlan& p = std::get<GenerationPlan>(r);
  EXPECT_EQ(p.requests[0].params.max_tokens + static_cast<int64_t>(p.requests[0].prompt.size()), 512);
  auto r2 = parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 9, "max_completion_tokens": 4,
                      "logprobs": true, "top_logprobs": 3})"),
      demo(), "req");
  EXPECT_EQ(std::get<GenerationPlan>(r2).requests[0].params.max_tokens, 4);
  EXPECT_EQ(std::get<GenerationPlan>(r2).requests[0].params.logprobs, 3);
}

TEST(OpenAiChat, MalformedBodiesAre400NamingTheField) {
  const BadCase cases[] = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [5]})", "messages[0]"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 50})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "model": "other"})", "model", 404},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {}}})",
       "response_format.json_schema.schema"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "bogus"}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": {"name": "f"}}})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]})",
       "tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "f", "x": 1}}})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}, "x": 1}]})",
       "tools[0].x"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "maybe"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": false})", "parallel_tool_calls"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "functions": []})", "functions"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "min_tokens": 5})", ""},
      {R"({"messages": [{"role": "user", "content": "hi"}], "store": true})", "store"},
  };
  for (const auto& c : cases) {
    ApiError e = chat_error(c.body);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body << ": " << e.message;
  }
}

TEST(OpenAiChat, FieldsAreReadOrRefusedNeverIgnored) {
  // A named function that tools lacks says so.
  ApiError missing = chat_error(R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}],
      "tool_choice": {"type": "function", "function": {"name": "send_mail"}}})");
  EXPECT_NE(missing.message.find("'send_mail', which is not in tools"), std::string::npos) << missing.message;
  ApiError unknown = chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"})");
  EXPECT_NE(unknown.message.find("'reasoning_effort' is not supported"), std::string::npos) << unknown.message;
  ApiError min = chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "min_tokens": 5})");
  EXPECT_NE(min.message.find("min_tokens"), std::string::npos) << min.message;
  // What is supported is read: text format, auto and none, parallel calls, the user, min_tokens.
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "response_format": {"type": "text"}, "tool_choice": "none", "parallel_tool_calls": true, "user": "u-1",
      "tools": [{"type": "function", "function": {"name": "f"}}], "max_tokens": 8, "min_tokens": 3})"),
                              demo(), "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  const GenerationPlan& plan = std::get<GenerationPlan>(r);
  EXPECT_EQ(plan.user, "u-1");
  EXPECT_EQ(plan.requests[0].params.min_tokens, 3);
}

TEST(OpenAiChat, ModelWithoutTemplateIsAClearError) {
  std::map<std::string, std::string> files = {
      {"tokenizer.json", read_source_file(std::string(KILN_SOURCE_DIR) + "/models/demo/tokenizer.json")}};
  auto m = served_model_from_files(files, "bare", 512, 8192, std::nullopt);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), *m, "req");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_NE(std::get<ApiError>(r).message.find("--chat-template"), std::string::npos);
  // ... and one given at start-up works.
  auto with = served_model_from_files(files, "bare", 512, 8192, std::string("{% for m in messages %}[{{ m.content }}]{% endfor %}"));
  ASSERT_TRUE(with.has_value()) << with.status().message();
  auto ok = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), *with, "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(ok));
  EXPECT_EQ(std::get<GenerationPlan>(ok).prompt_texts[0], "[hi]");
}

TEST(OpenAiBody, InvalidJsonAndInvalidUtf8AreRefused) {
  for (const std::string& body : {std::string("{"), std::string("[1, 2]"), std::string("\"text\""), std::string(""),
                                 std::string("{\"prompt\": \"\xff\xfe\"}"),
                                 // a number beyond a double: the parser throws out_of_range, not parse_error
                                 std::string("{\"max_tokens\": 7e777}")}) {
    auto r = parse_json_object(body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    EXPECT_EQ(std::get<ApiError>(r).status, 400);
    // The parser's own error ids stay inside.
    EXPECT_EQ(std::get<ApiError>(r).message.find("json.exception"), std::string::npos) << std::get<ApiError>(r).message;
  }
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_object("{\"prompt\": \"caf\xc3\xa9\"}")));
  // Nesting is bounded before anything recursive reads the body; brackets in strings do not count.
  const auto nested = [](int depth) {
    return "{\"a\": " + std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']') + "}";
  };
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_object(nested(kMaxJsonNesting - 1))));
  auto deep = parse_json_object(nested(200000));
  ASSERT_TRUE(std::holds_alternative<ApiError>(deep));
  EXPECT_NE(std::get<ApiError>(deep).message.find("200001 deep"), std::string::npos) << std::get<ApiError>(deep).message;
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_object("{\"a\": \"" + std::string(500, '[') + "\\\"\"}")));
}

TEST(OpenAiTokenize, RoundTrip) {
  auto t = tokenize_response(json::parse(R"({"prompt": "It is a truth"})"), demo());
  ASSERT_TRUE(std::holds_alternative<std::string>(t));
  json tj = json::parse(std::get<std::string>(t));
  EXPECT_EQ(tj["max_model_len"], 512);
  EXPECT_EQ(tj["count"], tj["tokens"].size());
  EXPECT_EQ(tj["tokens"][0], 0);
  auto d = detokenize_response(json{{"tokens", tj["tokens"]}}, demo());
  ASSERT_TRUE(std::holds_alternative<std::string>(d));
  EXPECT_EQ(json::parse(std::get<std::string>(d))["prompt"], "<s>It is a truth");
  auto chat = tokenize_response(json::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})"), demo());
  ASSERT_TRUE(std::holds_alternative<std::string>(chat));
  EXPECT_TRUE(std::holds_alternative<ApiError>(detokenize_response(json::parse(R"({"tokens": [1, 99999]})"), demo())));
  EXPECT_TRUE(std::holds_alternative<ApiError>(detokenize_response(json::parse(R"({})"), demo())));
}

TEST(OpenAiResponses, CompleteCompletionWithEchoAndLogprobs) {
  GenerationPlan p = completion(R"({"prompt": "It is", "echo": true, "logprobs": 1, "max_tokens": 2})");
  std::vector<ChoiceState> choices(1);
  choices[0].text = " a";
  choices[0].finish = llm::FinishReason::kLength;
  llm::TokenInfo gen;
  gen.token = p.requests[0].prompt.back();
  gen.logprob = -1.5f;
  gen.top = {{gen.token, -1.5f}};
  choices[0].tokens = {gen};
  std::vector<PromptState> prompts(1);
  for (size_t i = 0; i < p.requests[0].prompt.size(); ++i) {
    llm::TokenInfo t;
    t.token = p.requests[0].prompt[i];
    if (i > 0) t.logprob = -2.0f;
    prompts[0].tokens.push_back(t);
  }
  llm::RequestUsage usage{3, 2, 0};
  json out = json::parse(make_completion_format(demo())->complete(p, choices, prompts, usage));
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["model"], "demo");
  EXPECT_EQ(out["choices"][0]["text"], "It is a");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  const json& lp = out["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompts[0].tokens.size() + 1);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no logprob
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -2.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"].back().get<double>(), -1.5);
  EXPECT_TRUE(lp["top_logprobs"].back().is_object());
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(out["usage"]["total_tokens"], 5);
}

TEST(OpenAiResponses, ChatStreamChunksAndEnd) {
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true,
      "stream_options": {"include_usage": true}})"), demo(), "req");
  const GenerationPlan& p = std::get<GenerationPlan>(r);
  auto fmt = make_chat_format(demo());
  ChoiceState c;
  c.text = "Yes";
  std::string first = fmt->stream_chunk(p, c, PromptState{}, "Yes", {}, true);
  ASSERT_EQ(first.rfind("data: ", 0), 0u);
  ASSERT_EQ(first.substr(first.size() - 2), "\n\n");
  json j = json::parse(first.substr(6));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "Yes");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
  c.finish = llm::FinishReason::kStop;
  json last = json::parse(fmt->stream_chunk(p, c, PromptState{}, "", {}, false).substr(6));
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  std::string end = fmt->stream_end(p, llm::RequestUsage{4, 2, 0});
  EXPECT_NE(end.find("\"total_tokens\":6"), std::string::npos);
  EXPECT_EQ(end.substr(end.size() - 14), "data: [DONE]\n\n");
}

// Stream chunks without logprobs are written directly: the bytes must be those of the object
// tree the non-streaming code builds, serialised (sorted keys, no spaces).
TEST(OpenAiResponses, DirectStreamChunksAreTheSerialisedObjects) {
  std::string printable;  // every printable ASCII character, '"' and '\\' among them
  for (char ch = 0x20; ch < 0x7f; ++ch) printable += ch;
  const std::string texts[] = {"Yes", "", "say \"hi\"\n\tand \\ back", "caf\xc3\xa9 \xe2\x82\xac", "ab\xe2\x80", printable,
                               printable.substr(0, 2) + "\x7f" + printable.substr(60)};
  const llm::FinishReason finishes[] = {llm::FinishReason::kNone, llm::FinishReason::kStop, llm::FinishReason::kLength};
  for (bool usage : {false, true}) {
    const std::string opts = usage ? R"(, "stream_options": {"include_usage": true})" : "";
    auto r = parse_chat_request(
        json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true)" + opts + "}"), demo(), "req");
    const GenerationPlan& chat = std::get<GenerationPlan>(r);
    GenerationPlan comp = completion(R"({"prompt": "It is", "stream": true)" + opts + "}");
    // One format a stream, as a request has: every chunk after the first reuses what it wrote once.
    const auto chat_format = make_chat_format(demo());
    const auto comp_format = make_completion_format(demo());
    for (const std::string& text : texts) {
      for (llm::FinishReason finish : finishes) {
        for (bool first : {false, true}) {
          ChoiceState c;
          c.index = first ? 0 : 3;
          c.finish = finish;
          if (finish == llm::FinishReason::kStop) c.stop_string = "\"end\"";
          json delta = json::object();
          if (first) delta["role"] = "assistant";
          delta["content"] = text;
          json chat_want = {{"id", chat.id}, {"object", "chat.completion.chunk"}, {"created", chat.created},
                            {"model", chat.model},
                            {"choices", json::array({{{"index", c.index}, {"delta", delta}, {"logprobs", nullptr},
                                                      {"finish_reason", finish == llm::FinishReason::kNone
                                                                            ? json(nullptr)
                                                                            : json(llm::finish_reason_name(finish))}}})}};
          if (usage) chat_want["usage"] = nullptr;
          EXPECT_EQ(chat_format->stream_chunk(chat, c, PromptState{}, text, {}, first),
                    "data: " + dump_json(chat_want) + "\n\n");
          json comp_want = {{"id", comp.id}, {"object", "text_completion"}, {"created", comp.created},
                            {"model", comp.model},
                            {"choices", json::array({{{"index", c.index}, {"text", text}, {"logprobs", nullptr},
                                                      {"finish_reason", chat_want["choices"][0]["finish_reason"]},
                                                      {"stop_reason", c.stop_string ? json(*c.stop_string) : json(nullptr)}}})}};
          if (usage) comp_want["usage"] = nullptr;
          EXPECT_EQ(comp_format->stream_chunk(comp, c, PromptState{}, text, {}, first),
                    "data: " + dump_json(comp_want) + "\n\n");
        }
      }
    }
  }
}

TEST(OpenAiResponses, ErrorObjectShapeAndHeaders) {
  ApiError e = ApiError::bad_field("max_tokens", "max_tokens must be positive");
  json j = json::parse(openai_error_body(e));
  EXPECT_EQ(j["error"]["message"], "max_tokens must be positive");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_TRUE(j["error"]["code"].is_null());
  HttpResponse busy = openai_error_response({429, "busy", "rate_limit_error", std::nullopt, "server_busy"});
  EXPECT_EQ(busy.status, 429);
  ASSERT_EQ(busy.headers.size(), 1u);
  EXPECT_EQ(busy.headers[0].first, "Retry-After");
}

TEST(OpenAiResponses, InvalidUtf8InOutputIsReplacedNotFatal) {
  GenerationPlan p = completion(R"({"prompt": "x"})");
  std::vector<ChoiceState> choices(1);
  choices[0].text = "ab\xe2\x80";  // a character cut short
  json out = json::parse(make_completion_format(demo())->complete(p, choices, {PromptState{}}, {}));
  EXPECT_EQ(out["choices"][0]["text"], "ab\xef\xbf\xbd");
}

TEST(KServe, GenerateReadsTopLevelAndParameters) {
  auto r = parse_kserve_generate(json::parse(R"({"text_input": "It is", "max_tokens": 4,
      "parameters": {"temperature": 0, "stop": ["."]}})"), demo(), "id1", false);
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  const auto& p = std::get<GenerationPlan>(r);
  EXPECT_EQ(p.requests[0].params.max_tokens, 4);
  EXPECT_EQ(p.requests[0].params.temperature, 0.0f);
  EXPECT_EQ(p.requests[0].params.stop, std::vector<std::string>{"."});
  auto bad = parse_kserve_generate(json::parse(R"({"parameters": {}})"), demo(), "id", false);
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).param, "text_input");
  auto bad2 = parse_kserve_generate(json::parse(R"({"text_input": "x", "parameters": {"temperature": -1}})"), demo(), "id", false);
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad2));
  EXPECT_EQ(std::get<ApiError>(bad2).param, "parameters.temperature");
  auto unknown = parse_kserve_generate(json::parse(R"({"text_input": "x", "parameters": {"beam_width": 2}})"), demo(), "id", false);
  ASSERT_TRUE(std::holds_alternative<ApiError>(unknown));
  EXPECT_EQ(std::get<ApiError>(unknown).param, "parameters.beam_width");
  HttpResponse e = kserve_error_response(std::get<ApiError>(bad2));
  EXPECT_EQ(e.status, 400);
  EXPECT_TRUE(json::parse(e.body)["error"].is_string());
}

TEST(KServe, ResponsesAndMetadata) {
  auto r = parse_kserve_generate(json::parse(R"({"text_input": "It is"})"), demo(), "id1", true);
  const auto& p = std::get<GenerationPlan>(r);
  auto fmt = make_kserve_format(demo());
  ChoiceState c;
  c.text = "abc";
  c.finish = llm::FinishReason::kLength;
  json whole = json::parse(fmt->complete(p, {c}, {PromptState{}}, {}));
  EXPECT_EQ(whole["text_output"], "abc");
  EXPECT_EQ(whole["model_name"], "demo");
  json chunk = json::parse(fmt->stream_chunk(p, c, {}, "c", {}, false).substr(6));
  EXPECT_EQ(chunk["text_output"], "c");
  EXPECT_EQ(chunk["finish_reason"], "length");
  EXPECT_EQ(json::parse(kserve_model_metadata(demo()))["name"], "demo");
  EXPECT_EQ(json::parse(kserve_server_metadata())["extensions"][0], "generate");
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

// Whether the plan's grammar accepts `text` as a whole output.
bool plan_accepts(const GenerationPlan& plan, std::string_view text) {
  llm::structured::GrammarMatcher m(plan.requests.at(0).grammar);
  return m.accept_bytes(text) && m.can_end();
}

TEST(OpenAiStructuredOutputs, JsonSchemaKeepsThePropertyOrderOfTheBody) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "boolean"}}, "required": ["zeta", "alpha"], "additionalProperties": false}}}})";
  auto r = parse_chat_request(json::parse(body), demo(), "req", body);
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  const auto& plan = std::get<GenerationPlan>(r);
  ASSERT_TRUE(plan.requests.at(0).grammar);
  EXPECT_TRUE(plan_accepts(plan, R"({"zeta": 3, "alpha": true})"));
  EXPECT_FALSE(plan_accepts(plan, R"({"alpha": true, "zeta": 3})"));
}

TEST(OpenAiStructuredOutputs, EachKindCompilesAndRepeatsComeFromTheCache) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"structured_outputs": {"choice": ["red", "green"]}})", "green"},
      {R"({"structured_outputs": {"regex": "[0-9]{3}-[a-z]+"}})", "123-abc"},
      {R"({"structured_outputs": {"grammar": "root ::= \"yes\" | \"no\""}})", "no"},
      {R"({"structured_outputs": {"json": "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}"}})", "[1, 2]"},
      {R"({"structured_outputs": {"json": {"type": "string", "format": "ipv4"}}})", R"("10.0.0.255")"},
      {R"({"response_format": {"type": "json_object"}})", R"({"k": [null]})"},
  };
  for (const auto& [fields, output] : cases) {
    json body = json::parse(fields);
    body["prompt"] = "x";
    const auto before = demo().grammars->stats();
    for (int i = 0; i < 2; ++i) {
      auto r = parse_completion_request(body, demo(), "req", body.dump());
      ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << fields << ": " << std::get<ApiError>(r).message;
      EXPECT_TRUE(plan_accepts(std::get<GenerationPlan>(r), output)) << fields;
      EXPECT_FALSE(plan_accepts(std::get<GenerationPlan>(r), output + "!")) << fields;
    }
    const auto after = demo().grammars->stats();
    EXPECT_GE(after.hits - before.hits, 1) << fields;
  }
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

const char* kToolsBody = R"({"messages": [{"role": "user", "content": "weather?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "strict": true, "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                              "additionalProperties": false}}}],
    "tool_choice": "TOOL_CHOICE", "parallel_tool_calls": PARALLEL})";

// The data payloads of server-sent events.
std::vector<std::string> sse_data_of(const std::string& events) {
  std::vector<std::string> out;
  for (size_t at = events.find("data: "); at != std::string::npos; at = events.find("data: ", at)) {
    const size_t end = events.find("\n\n", at);
    out.push_back(events.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

GenerationPlan tools_plan(const std::string& choice, bool parallel) {
  std::string body = kToolsBody;
  body.replace(body.find("TOOL_CHOICE"), 11, choice);
  body.replace(body.find("PARALLEL"), 8, parallel ? "true" : "false");
  auto r = parse_chat_request(json::parse(body), demo(), "req", body);
  EXPECT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  return std::get<GenerationPlan>(std::move(r));
}

TEST(OpenAiChatTools, TheDemoTemplateTeachesHermesAndForcedCallsGetAGrammar) {
  ASSERT_EQ(demo().tool_syntax, llm::tools::ToolCallSyntax::kHermes);
  const GenerationPlan plan = tools_plan("auto", true);
  ASSERT_TRUE(plan.tool_calling.has_value());
  EXPECT_FALSE(plan.tool_calling->forced);
  EXPECT_EQ(plan.requests[0].grammar, nullptr);
  EXPECT_NE(plan.prompt_texts[0].find("Tools:\nget_weather {\"city\": {\"type\": \"string\"}}\nTo call one"), std::string::npos)
      << plan.prompt_texts[0];
  const GenerationPlan forced = tools_plan("required", false);
  EXPECT_TRUE(forced.tool_calling->forced);
  EXPECT_FALSE(forced.tool_calling->parallel);
  EXPECT_NE(forced.requests[0].grammar, nullptr);
  // The same tools again: the cached grammar.
  EXPECT_EQ(tools_plan("required", false).requests[0].grammar, forced.requests[0].grammar);
  // A call and its result, rendered as the model writes calls.
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "snow"}]})"),
                              demo(), "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(r)) << std::get<ApiError>(r).message;
  EXPECT_EQ(std::get<GenerationPlan>(r).prompt_texts[0],
            "<s>\"weather?\" said the visitor.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Oslo\"}}\n</tool_call>\n\n<tool_response>\nsnow\n</tool_response>\n\n\"");
}

TEST(OpenAiChatTools, CallsComeBackAsToolCallsWholeAndStreamed) {
  const GenerationPlan plan = tools_plan("auto", true);
  const std::string text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  ChoiceState c;
  c.text = text;
  c.finish = llm::FinishReason::kStop;
  auto format = make_chat_format(demo());
  const json whole = json::parse(format->complete(plan, {c}, {PromptState{}}, {}));
  const json& choice = whole["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Oslo"}}));
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);

  // Streamed three bytes at a time: the content, then the call in two pieces, then the finish.
  GenerationPlan streamed = plan;
  streamed.stream = true;
  auto stream_format = make_chat_format(demo());
  ChoiceState sc;
  std::string content, arguments, name, finish;
  int chunks_with_role = 0;
  for (size_t i = 0; i < text.size(); i += 3) {
    if (i + 3 >= text.size()) sc.finish = llm::FinishReason::kStop;
    const std::string events = stream_format->stream_chunk(streamed, sc, {}, text.substr(i, 3), {}, i == 0);
    for (const std::string& data : sse_data_of(events)) {
      const json ch = json::parse(data)["choices"][0];
      const json& d = ch["delta"];
      if (d.contains("role")) ++chunks_with_role;
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        EXPECT_EQ(d["tool_calls"][0]["index"], 0);
        const json& fn = d["tool_calls"][0]["function"];
        if (fn.contains("name")) name += fn["name"].get<std::string>();
        arguments += fn.value("arguments", "");
      }
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"].get<std::string>();
    }
  }
  EXPECT_EQ(chunks_with_role, 1);
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(arguments), json({{"city", "Oslo"}}));
  EXPECT_EQ(finish, "tool_calls");
}

TEST(OpenAiChatTools, WithoutParallelCallsOnlyTheFirstComesBack) {
  const GenerationPlan plan = tools_plan("auto", false);
  const std::string block = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}\n</tool_call>\n";
  ChoiceState c;
  c.text = block + block;
  c.finish = llm::FinishReason::kStop;
  const json whole = json::parse(make_chat_format(demo())->complete(plan, {c}, {PromptState{}}, {}));
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_TRUE(whole["choices"][0]["message"]["content"].is_null());
}

TEST(OpenAiChatTools, AModelWithoutACallFormatRefusesToolsUnlessNone) {
  std::map<std::string, std::string> files = {
      {"tokenizer.json", read_source_file(std::string(KILN_SOURCE_DIR) + "/models/demo/tokenizer.json")}};
  auto m = served_model_from_files(files, "bare", 512, 8192, std::string("{% for m in messages %}[{{ m.content }}]{% endfor %}"));
  ASSERT_TRUE(m.has_value());
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}], )" + tools + "}"), *m, "req");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).param.value_or(""), "tools");
  EXPECT_NE(std::get<ApiError>(r).message.find("--tool-call-parser"), std::string::npos);
  auto none = parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none", )" + tools + "}"), *m, "req");
  EXPECT_TRUE(std::holds_alternative<GenerationPlan>(none));
  // Named at start-up, the syntax is used.
  auto named = served_model_from_files(files, "bare", 512, 8192, std::string("{{ messages[0].content }}"),
                                       llm::tools::ToolCallSyntax::kLlama3Json);
  ASSERT_TRUE(named.has_value());
  auto ok = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}], )" + tools + "}"), *named, "req");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(ok)) << std::get<ApiError>(ok).message;
  EXPECT_EQ(std::get<GenerationPlan>(ok).tool_calling->syntax, llm::tools::ToolCallSyntax::kLlama3Json);
}

}  // namespace
}  // namespace kiln::server
