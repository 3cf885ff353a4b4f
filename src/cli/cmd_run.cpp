// kiln run ENGINE -p "prompt" [sampling options]     stream a completion to the terminal
// kiln run ENGINE --chat [--system "..."] [--chat-template FILE]   interactive chat through a chat template
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "llm/jinja/chat_template.h"
#include "llm/generation/generator.h"
#include "llm/generation/sampling_params.h"

namespace kiln::cli {
namespace {

struct RunArgs {
  std::string engine, prompt, system, chat_template;
  std::string kv_cache_dtype = "auto";
  bool chat = false, no_stats = false;
  int threads = 0;
  int32_t max_tokens = 256;
  float temperature = -1, top_p = -1, min_p = -1, repetition_penalty = -1;
  int32_t top_k = -1;
  int64_t seed = -1;
  std::vector<std::string> stop;
};

struct Loaded {
  Session session;
  std::unique_ptr<llm::Tokenizer> tokenizer;
  llm::GenerationDefaults defaults;
  std::map<std::string, std::string> files;
};

Expected<Loaded> load(const RunArgs& a) {
  Loaded l;
  auto kv_dtype = runtime::parse_kv_cache_dtype_choice(a.kv_cache_dtype);
  if (!kv_dtype) return kv_dtype.status().with_context("--kv-cache-dtype");
  KILN_ASSIGN_OR_RETURN(l.session, open_session(a.engine, a.threads, INT64_MAX, *kv_dtype));
  l.files = l.session.model->files();
  KILN_ASSIGN_OR_RETURN(l.tokenizer, llm::tokenizer_from_files(l.files));
  if (auto it = l.files.find("generation_config.json"); it != l.files.end()) {
    KILN_ASSIGN_OR_RETURN(l.defaults, llm::generation_defaults_from_json(it->second));
  }
  if (l.defaults.eos_token_ids.empty() && l.tokenizer->eos_id()) l.defaults.eos_token_ids = {*l.tokenizer->eos_id()};
  // Command-line values override the model's generation_config.json.
  llm::SamplingParams& p = l.defaults.params;
  p.max_tokens = a.max_tokens;
  if (a.temperature >= 0) p.temperature = a.temperature;
  if (a.top_k >= 0) p.top_k = a.top_k;
  if (a.top_p >= 0) p.top_p = a.top_p;
  if (a.min_p >= 0) p.min_p = a.min_p;
  if (a.repetition_penalty >= 0) p.repetition_penalty = a.repetition_penalty;
  if (a.seed >= 0) p.seed = static_cast<uint64_t>(a.seed);
  p.stop = a.stop;
  KILN_RETURN_IF_ERROR(llm::validate(p, l.session.model->facts().vocab_size));
  return l;
}

Expected<llm::GenerationResult> generate_streaming(Loaded& l, const std::vector<int32_t>& prompt) {
  llm::Generator gen(*l.session.executor, *l.session.cache, *l.tokenizer, l.session.model->facts().vocab_size);
  return gen.generate(prompt, l.defaults.params, l.defaults.eos_token_ids, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
}

void print_stats(const llm::GenerationResult& r) {
  std::fprintf(stderr, "\n[%lld prompt tokens, %zu generated (%s); time to first token %.0f ms, %.1f tokens/s]\n",
               static_cast<long long>(r.prompt_tokens), r.tokens.size(), std::string(llm::finish_reason_name(r.finish)).c_str(),
               r.time_to_first_token_s * 1e3, r.decode_tokens_per_s);
}

int run_prompt(const RunArgs& a) {
  auto l = load(a);
  if (!l) return fail(l.status());
  auto prompt = l->tokenizer->encode(a.prompt, true);
  if (!prompt) return fail(prompt.status());
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  auto r = generate_streaming(*l, *prompt);
  if (!r) return fail(r.status());
  std::fputs("\n", stdout);
  if (!a.no_stats) print_stats(*r);
  return 0;
}

// The template from --chat-template (with the model's special tokens), else the model's own.
Expected<llm::ChatTemplate> chat_template_for(const RunArgs& a, const std::map<std::string, std::string>& files) {
  auto config = files.find("tokenizer_config.json");
  if (!a.chat_template.empty()) {
    std::ifstream in(a.chat_template, std::ios::binary);
    if (!in) return not_found("--chat-template '" + a.chat_template + "' cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    std::string bos, eos;
    if (config != files.end()) {
      const auto j = nlohmann::json::parse(config->second, nullptr, false);
      auto token = [&](const char* key) -> std::string {
        if (!j.is_object() || !j.contains(key)) return {};
        if (j[key].is_string()) return j[key].get<std::string>();
        if (j[key].is_object() && j[key].contains("content") && j[key]["content"].is_string()) return j[key]["content"].get<std::string>();
        return {};
      };
      bos = token("bos_token");
      eos = token("eos_token");
    }
    auto t = llm::ChatTemplate::compile(text.str(), bos, eos);
    if (!t) return t.status().with_context(a.chat_template);
    return t;
  }
  if (config == files.end() || config->second.find("\"chat_template\"") == std::string::npos) {
    return invalid_argument(a.engine + " has no chat template; pass one with --chat-template FILE, or use -p for plain completion");
  }
  return llm::ChatTemplate::from_tokenizer_config(config->second);
}

int run_chat(const RunArgs& a) {
  auto l = load(a);
  if (!l) return fail(l.status());
  auto tmpl = chat_template_for(a, l->files);
  if (!tmpl) return fail(tmpl.status());
  std::vector<llm::ChatMessage> history;
  if (!a.system.empty()) history.push_back({"system", a.system, {}});
  std::fprintf(stderr, "chat with %s — Ctrl-D to leave\n", a.engine.c_str());
  std::string line;
  while (true) {
    std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    history.push_back({"user", line, {}});
    llm::ChatTemplateOptions options;
    auto text = tmpl->render(history, options);
    if (!text) return fail(text.status());
    // The template writes BOS itself when the model wants one.
    auto prompt = l->tokenizer->encode(*text, false);
    if (!prompt) return fail(prompt.status());
    auto r = generate_streaming(*l, *prompt);
    if (!r) return fail(r.status());
    std::fputs("\n", stdout);
    if (!a.no_stats) print_stats(*r);
    history.push_back({"assistant", r->text, {}});
  }
  std::fputs("\n", stderr);
  return 0;
}

}  // namespace

CommandFn add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text with an engine: a prompt, or an interactive chat");
  cmd->add_option("engine", args->engine, "engine file")->required();
  auto* p = cmd->add_option("-p,--prompt", args->prompt, "prompt to complete");
  auto* c = cmd->add_flag("--chat", args->chat, "interactive chat through the model's chat template");
  p->excludes(c);
  cmd->add_option("--system", args->system, "system message for --chat");
  cmd->add_option("--chat-template", args->chat_template, "Jinja chat template file for --chat (for a model without one)");
  cmd->add_option("-n,--max-tokens", args->max_tokens, "most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy (default: the model's generation_config)");
  cmd->add_option("--top-k", args->top_k, "keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass (1 = off)");
  cmd->add_option("--min-p", args->min_p, "drop tokens below min-p x the top probability");
  cmd->add_option("--repetition-penalty", args->repetition_penalty, "> 1 discourages repeats");
  cmd->add_option("--seed", args->seed, "random seed (same seed, same text)");
  cmd->add_option("--stop", args->stop, "stop string (repeatable)");
  cmd->add_flag("--no-stats", args->no_stats, "do not print timing at the end");
  cmd->add_option("--threads", args->threads, "threads (default: all cores)");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "KV cache element: auto (bf16 for a bf16 engine, else fp32), fp32, bf16 (half the memory) or fp8 (e4m3, a "
                  "quarter)")
      ->capture_default_str();
  return [args] {
    if (!args->chat && args->prompt.empty()) return fail(invalid_argument("give a prompt with -p, or --chat"));
    return args->chat ? run_chat(*args) : run_prompt(*args);
  };
}

}  // namespace kiln::cli
