// Tool calls: the syntax a template teaches, the parser (whole and streamed, in any pieces) and
// the grammar that writes forced calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "llm/structured/compiled_grammar.h"
#include "llm/structured/grammar_matcher.h"
#include "llm/tools/tool_call_grammar.h"
#include "llm/tools/tool_call_parser.h"

namespace kiln::llm::tools {
namespace {

std::string demo_template() {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/models/demo/tokenizer_config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str())["chat_template"].get<std::string>();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The real templates the chat-template tests render (tests/templates/): Llama 3.2's teaches
// llama3_json; those without tools teach nothing; Qwen3's (installed under KILN_TEMPLATES_DIR)
// teaches hermes.
TEST(ToolCallSyntax, FoundInRealTemplates) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/templates/templates/";
  EXPECT_EQ(detect_tool_call_syntax(read_file(dir + "llama3_2.jinja")), ToolCallSyntax::kLlama3Json);
  for (const char* none : {"chatml.jinja", "mistral_instruct.jinja", "llama2_chat.jinja", "baichuan2.jinja"}) {
    const std::string source = read_file(dir + none);
    ASSERT_FALSE(source.empty()) << none;
    EXPECT_EQ(detect_tool_call_syntax(source), std::nullopt) << none;
  }
  const char* templates = std::getenv("KILN_TEMPLATES_DIR");
  ASSERT_NE(templates, nullptr) << "KILN_TEMPLATES_DIR is not set: run tests/templates/setup.sh DIR and set it to DIR";
  const auto qwen3 = nlohmann::json::parse(read_file(std::string(templates) + "/qwen3/tokenizer_config.json"));
  EXPECT_EQ(detect_tool_call_syntax(qwen3["chat_template"].get<std::string>()), ToolCallSyntax::kHermes);
  const auto llama3 = nlohmann::json::parse(read_file(std::string(templates) + "/llama3/tokenizer_config.json"));
  EXPECT_EQ(detect_tool_call_syntax(llama3["chat_template"].get<std::string>()), std::nullopt);  // Llama 3.0: no tools
}

TEST(ToolCallSyntax, FoundInTheTemplate) {
  EXPECT_EQ(detect_tool_call_syntax(demo_template()), ToolCallSyntax::kHermes);
  EXPECT_EQ(detect_tool_call_syntax("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}"), ToolCallSyntax::kMistral);
  EXPECT_EQ(detect_tool_call_syntax("<|start_header_id|>ipython ... {\"name\": function name, \"parameters\": ...}"),
            ToolCallSyntax::kLlama3Json);
  EXPECT_EQ(detect_tool_call_syntax("{{ '<|python_tag|>' }}"), ToolCallSyntax::kLlama3Json);
  EXPECT_EQ(detect_tool_call_syntax("{% for m in messages %}{{ m.content }}{% endfor %}"), std::nullopt);
  for (auto s : {ToolCallSyntax::kHermes, ToolCallSyntax::kLlama3Json, ToolCallSyntax::kMistral}) {
    EXPECT_EQ(tool_call_syntax_named(tool_call_syntax_name(s)), s);
  }
  EXPECT_EQ(tool_call_syntax_named("qwen"), std::nullopt);
}

// The same text fed in pieces of `piece` bytes, the outputs joined.
ToolCallOutput streamed(ToolCallSyntax syntax, bool forced, std::string_view text, size_t piece) {
  ToolCallParser p(syntax, forced);
  ToolCallOutput all;
  auto add = [&](ToolCallOutput o) {
    all.content += o.content;
    for (auto& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += piece) add(p.feed(text.substr(i, piece)));
  add(p.finish());
  return all;
}

void expect_same_in_any_pieces(ToolCallSyntax syntax, bool forced, std::string_view text, const ToolCallOutput& want) {
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, text.size() + 1}) {
    const ToolCallOutput got = streamed(syntax, forced, text, piece);
    EXPECT_EQ(got.content, want.content) << "pieces of " << piece;
    ASSERT_EQ(got.calls.size(), want.calls.size()) << "pieces of " << piece;
    for (size_t i = 0; i < want.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, want.calls[i].name);
      EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments);
    }
  }
}

TEST(ToolCallParser, HermesBlocksBetweenText) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const auto out = ToolCallParser::parse(ToolCallSyntax::kHermes, false, text);
  EXPECT_EQ(out.content, "Let me look.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(out.calls[0].arguments), nlohmann::json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, "{}");
  expect_same_in_any_pieces(ToolCallSyntax::kHermes, false, text, out);
}

TEST(ToolCallParser, HermesTextWithoutCallsIsContentAsWritten) {
  const std::string text = "a < b and <tool but not a call: <tool_cal";
  const auto out = ToolCallParser::parse(ToolCallSyntax::kHermes, false, text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
  expect_same_in_any_pieces(ToolCallSyntax::kHermes, false, text, out);
  // A block that is not a call goes back as it was; whitespace alone survives when nothing was called.
  const std::string bad = "<tool_call>\n{\"name\": 3}\n</tool_call>";
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kHermes, false, bad).content, bad);
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kHermes, false, "\n\n").content, "\n\n");
}

TEST(ToolCallParser, HermesCallWithoutItsEndTagStillCounts) {
  const auto out = ToolCallParser::parse(ToolCallSyntax::kHermes, false,
                                         "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{\"x\":1}");  // arguments given as JSON text are read as the object
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kHermes, false, "<tool_call>\n{\"name\": \"f\"").content,
            "<tool_call>\n{\"name\": \"f\"");
}

TEST(ToolCallParser, Llama3JsonCallsAndPlainText) {
  const std::string text =
      "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b}\"}}; {\"name\": \"add\", \"parameters\": {\"a\": [1, 2]}}";
  const auto out = ToolCallParser::parse(ToolCallSyntax::kLlama3Json, false, text);
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "search");
  EXPECT_EQ(out.calls[0].arguments, "{\"q\":\"a;b}\"}");
  EXPECT_EQ(out.calls[1].arguments, "{\"a\":[1,2]}");
  expect_same_in_any_pieces(ToolCallSyntax::kLlama3Json, false, text, out);
  const std::string plain = "  The answer is {not JSON}.";
  expect_same_in_any_pieces(ToolCallSyntax::kLlama3Json, false, "Hello {there}", {"Hello {there}", {}});
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kLlama3Json, false, plain).content, plain);
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kLlama3Json, false, "{\"name\": \"f\"} trailing").content,
            "{\"name\": \"f\"} trailing");
}

TEST(ToolCallParser, MistralListAfterTheMarker) {
  const std::string text =
      "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
  const auto out = ToolCallParser::parse(ToolCallSyntax::kMistral, false, text);
  EXPECT_EQ(out.content, "Sure.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "b");
  expect_same_in_any_pieces(ToolCallSyntax::kMistral, false, text, out);
  // Forced (written by the grammar): no marker.
  const auto forced = ToolCallParser::parse(ToolCallSyntax::kMistral, true, "[{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(forced.calls.size(), 1u);
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kMistral, false, "[TOOL_CALLS]not json").content, "[TOOL_CALLS]not json");
}

std::vector<std::optional<std::string>> byte_tokens() {
  std::vector<std::optional<std::string>> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return bytes;
}

bool accepts(const structured::Grammar& g, std::string_view text) {
  auto compiled = structured::CompiledGrammar::compile(g, std::make_shared<structured::TokenVocabulary>(byte_tokens()));
  EXPECT_TRUE(compiled.has_value());
  structured::GrammarMatcher m(*compiled);
  return m.accept_bytes(text) && m.can_end();
}

const std::vector<ToolFunction> kFunctions = {
    {"get_weather",
     R"({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false})",
     "tools[0].function.parameters"},
    {"now", "", "tools[1].function.parameters"},
};

TEST(ToolCallGrammar, WritesCallsTheParserReads) {
  auto one = tool_call_grammar(ToolCallSyntax::kHermes, kFunctions, false);
  ASSERT_TRUE(one.has_value()) << one.status().message();
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>";
  EXPECT_TRUE(accepts(*one, call));
  EXPECT_TRUE(accepts(*one, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*one, call + "\n" + call));  // one call only
  EXPECT_FALSE(accepts(*one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*one, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  auto many = tool_call_grammar(ToolCallSyntax::kHermes, kFunctions, true);
  ASSERT_TRUE(many.has_value());
  EXPECT_TRUE(accepts(*many, call + "\n" + call));
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kHermes, true, call + "\n" + call).calls.size(), 2u);

  auto llama = tool_call_grammar(ToolCallSyntax::kLlama3Json, kFunctions, true);
  ASSERT_TRUE(llama.has_value());
  const std::string l = "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}";
  EXPECT_TRUE(accepts(*llama, l));
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kLlama3Json, true, l).calls.size(), 2u);

  auto mistral = tool_call_grammar(ToolCallSyntax::kMistral, kFunctions, true);
  ASSERT_TRUE(mistral.has_value());
  const std::string ms = "[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]";
  EXPECT_TRUE(accepts(*mistral, ms));
  EXPECT_EQ(ToolCallParser::parse(ToolCallSyntax::kMistral, true, ms).calls.size(), 2u);
}

TEST(ToolCallGrammar, AnUnsupportedSchemaKeywordIsNamedWithItsPath) {
  auto g = tool_call_grammar(ToolCallSyntax::kHermes,
                             {{"f", R"({"type": "object", "patternProperties": {}})", "tools[0].function.parameters"}}, false);
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.status().message().find("tools[0].function.parameters"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("patternProperties"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace kiln::llm::tools
