// kiln tokenize ENGINE_OR_MODEL_DIR (--text TEXT | --decode 1,2,3) [--no-special]
// Runs the tokenizer an engine (or a Hugging Face model directory) carries: --text prints the
// ids, comma-separated; --decode prints the text of ids. --no-special leaves out BOS/EOS when
// encoding and special tokens when decoding.
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "cli/commands.h"
#include "llm/tokenizers/tokenizer.h"
#include "runtime/loaded_model.h"

namespace kiln::cli {
namespace {

struct TokenizeArgs {
  std::string source, text, decode;
  bool no_special = false;
  bool decoding = false;  // --decode was given
};

// The tokenizer files an engine carries (see LoadedModel::files).
Expected<std::map<std::string, std::string>> engine_tokenizer_files(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::LoadedModel> model, runtime::LoadedModel::load(path));
  return model->files();
}

int run_tokenize(const TokenizeArgs& a) {
  std::error_code ec;
  if (!std::filesystem::exists(a.source, ec)) {
    return fail(not_found(a.source + ": no such engine file or model directory"));
  }
  const bool is_dir = std::filesystem::is_directory(a.source, ec);
  auto files = is_dir ? llm::tokenizer_files_in_dir(a.source) : engine_tokenizer_files(a.source);
  if (!files) return fail(files.status());
  auto tokenizer = llm::tokenizer_from_files(*files);
  if (!tokenizer) return fail(tokenizer.status().with_context(a.source));

  if (a.decoding) {
    auto ids = parse_id_list(a.decode);
    if (!ids) {
      std::string message = ids.status().message();
      if (message.rfind("--ids", 0) == 0) message = "--decode" + message.substr(5);
      return fail(invalid_argument(message));
    }
    auto text = (*tokenizer)->decode(*ids, a.no_special);
    if (!text) return fail(text.status().with_context("--decode"));
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::printf("\n");
    return 0;
  }
  auto ids = (*tokenizer)->encode(a.text, !a.no_special);
  if (!ids) return fail(ids.status());
  for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? "," : "", (*ids)[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

CommandFn add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text to token ids, or decode ids, with a model's tokenizer");
  cmd->add_option("source", args->source, "engine file or Hugging Face model directory")->required();
  auto* text = cmd->add_option("--text", args->text, "text to encode; prints comma-separated ids");
  auto* decode = cmd->add_option("--decode", args->decode, "comma-separated ids to decode; prints the text");
  text->excludes(decode);
  cmd->add_flag("--no-special", args->no_special, "no BOS/EOS when encoding; skip special tokens when decoding");
  cmd->callback([args, text, decode] {
    if (text->count() == 0 && decode->count() == 0) throw CLI::RequiredError("--text or --decode");
    args->decoding = decode->count() > 0;
  });
  return [args] { return run_tokenize(*args); };
}

}  // namespace kiln::cli
