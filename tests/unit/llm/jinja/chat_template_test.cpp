// Chat template parity: every real template x conversation must render byte-identically to Python
// jinja2 in transformers' environment. The references are made at test time:
//   tests/templates/setup.sh OUT_DIR && /usr/bin/python3 tests/templates/render_reference.py OUT_DIR
// and found through KILN_TEMPLATES_DIR=OUT_DIR.
#include "llm/jinja/chat_template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kiln::llm {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ChatMessage> to_messages(const nlohmann::ordered_json& json) {
  std::vector<ChatMessage> messages;
  for (const auto& m : json) {
    ChatMessage message;
    message.role = m.at("role").get<std::string>();
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (const auto& [key, value] : m.items()) {
      if (key == "role") continue;
      if (key == "content" && value.is_string()) {
        message.content = value.get<std::string>();
      } else {
        extra[key] = value;
      }
    }
    if (!extra.empty()) message.extra = extra;
    messages.push_back(std::move(message));
  }
  return messages;
}

std::string templates_dir() {
  const char* dir = std::getenv("KILN_TEMPLATES_DIR");
  return dir == nullptr ? "" : dir;
}

TEST(ChatTemplateParity, RendersEveryTemplateLikeTransformers) {
  const std::string dir = templates_dir();
  ASSERT_FALSE(dir.empty()) << "KILN_TEMPLATES_DIR is not set: run `tests/templates/setup.sh DIR && /usr/bin/python3 "
                               "tests/templates/render_reference.py DIR` and set KILN_TEMPLATES_DIR=DIR";
  std::ifstream in(dir + "/expected.jsonl");
  ASSERT_TRUE(in.good()) << dir << "/expected.jsonl is missing: run tests/templates/render_reference.py " << dir;
  std::string line;
  int renders = 0;
  int errors = 0;
  std::set<std::string> templates;
  while (std::getline(in, line)) {
    auto record = nlohmann::ordered_json::parse(line);
    const std::string name = record["template"].get<std::string>() + " x " + record["conversation"].get<std::string>();
    SCOPED_TRACE(name);
    templates.insert(record["template"].get<std::string>());
    Expected<ChatTemplate> compiled = record["config"].is_string()
                                          ? ChatTemplate::from_tokenizer_config(read_file(dir + "/" + record["config"].get<std::string>()))
                                          : ChatTemplate::compile(record["source"].get<std::string>(),
                                                                  record["bos_token"].get<std::string>(),
                                                                  record["eos_token"].get<std::string>());
    ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
    ChatTemplateOptions options;
    options.add_generation_prompt = record["add_generation_prompt"].get<bool>();
    options.tools = record["tools"];
    options.extra_context = record["extra_context"];
    auto rendered = compiled->render(to_messages(record["messages"]), options);
    if (record.contains("expected")) {
      ASSERT_TRUE(rendered.has_value()) << rendered.status().message();
      EXPECT_EQ(*rendered, record["expected"].get<std::string>());
      ++renders;
    } else {
      ASSERT_FALSE(rendered.has_value()) << "jinja2 failed with: " << record["error"] << "\nbut we rendered:\n" << *rendered;
      if (record["raised"].get<bool>()) {
        EXPECT_NE(rendered.status().message().find(record["error"].get<std::string>()), std::string::npos)
            << rendered.status().message();
      }
      ++errors;
    }
  }
  EXPECT_GE(templates.size(), 7u);
  EXPECT_GE(renders, 80);
  EXPECT_GE(errors, 1);
}

TEST(ChatTemplate, SyntaxErrorNamesTheLine) {
  auto compiled = ChatTemplate::compile("{% for m in messages %}\n{{ m.content }\n{% endfor %}", "<s>", "</s>");
  ASSERT_FALSE(compiled.has_value());
  EXPECT_EQ(compiled.status().message().rfind("chat template line 2, column ", 0), 0u) << compiled.status().message();
}

TEST(ChatTemplate, RaiseExceptionBecomesTheError) {
  auto compiled = ChatTemplate::compile(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ m.content }}{% endfor %}",
      "<s>", "</s>");
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  auto ok = compiled->render({{"user", "hi", {}}}, {});
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  EXPECT_EQ(*ok, "hi");
  auto failed = compiled->render({{"system", "be nice", {}}, {"user", "hi", {}}}, {});
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.status().message(), "chat template line 1, column 69: System role not supported");
}

TEST(ChatTemplate, ContextMirrorsTransformers) {
  auto compiled = ChatTemplate::compile(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ messages[0].name }}|{{ messages[0].content is none }}|{{ flag }}|{{ eos_token }}",
      "<s>", "</s>");
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  ChatTemplateOptions options;
  options.add_generation_prompt = false;
  options.extra_context = {{"flag", 7}};
  ChatMessage message{"assistant", "ignored", {{"name", "bot"}, {"content", nullptr}}};
  auto rendered = compiled->render({message}, options);
  ASSERT_TRUE(rendered.has_value()) << rendered.status().message();
  EXPECT_EQ(*rendered, "<s>|True|True|False|bot|True|7|</s>");
}

TEST(ChatTemplate, FromTokenizerConfigForms) {
  auto list_form = ChatTemplate::from_tokenizer_config(R"({
    "bos_token": {"content": "<B>", "lstrip": false}, "eos_token": null,
    "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}{{ eos_token is defined }}"}]})");
  ASSERT_TRUE(list_form.has_value()) << list_form.status().message();
  auto rendered = list_form->render({}, {});
  ASSERT_TRUE(rendered.has_value()) << rendered.status().message();
  EXPECT_EQ(*rendered, "<B>False");

  auto missing = ChatTemplate::from_tokenizer_config(R"({"bos_token": "<s>"})");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ChatTemplate::from_tokenizer_config("not json").has_value());
  auto bad = ChatTemplate::from_tokenizer_config(R"({"chat_template": "{{ x | nope }}"})");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("chat template line 1, column 8: unknown filter 'nope'"), std::string::npos)
      << bad.status().message();
}

TEST(ChatTemplate, HostileInputsAreErrors) {
  auto compiled = ChatTemplate::compile("{{ messages[0].extra | tojson }}", "", "");
  ASSERT_TRUE(compiled.has_value());
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  ChatMessage message{"user", "x", {{"extra", deep}}};
  auto rendered = compiled->render({message}, {});
  ASSERT_FALSE(rendered.has_value());
  EXPECT_NE(rendered.status().message().find("nested too deeply"), std::string::npos);
  ChatTemplateOptions options;
  options.extra_context = nlohmann::ordered_json::array({1});
  EXPECT_FALSE(compiled->render({}, options).has_value());
}

TEST(ChatTemplate, RendersConcurrently) {
  auto compiled = ChatTemplate::compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ ns.n }}:{{ m.content }};{% endfor %}",
      "", "");
  ASSERT_TRUE(compiled.has_value());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      std::vector<ChatMessage> messages;
      for (size_t i = 0; i <= t; ++i) messages.push_back({"user", std::to_string(t), {}});
      for (int rep = 0; rep < 50; ++rep) {
        auto r = compiled->render(messages, {});
        results[t] = r.has_value() ? *r : r.status().message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < results.size(); ++t) {
    std::string expected;
    for (size_t i = 0; i <= t; ++i) expected += std::to_string(i + 1) + ":" + std::to_string(t) + ";";
    EXPECT_EQ(results[t], expected);
  }
}

}  // namespace
}  // namespace kiln::llm
